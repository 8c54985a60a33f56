// The subcommands of the `kiln` command line.
#pragma once

#include <kiln/dtype.h>

#include <cstdint>
#include <filesystem>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace kiln::tools {

// `kiln info`: version, compiled-in backends and their availability, devices with their
// backend chain, and the dtype usage table per device.
int run_info(std::ostream& out);

// `kiln tune list|clear`: the autotune cache's choices (key, choice, heuristic and chosen times),
// or forgets them all.
int run_tune(const std::string& action, std::ostream& out);

// Where data shipped with kiln is found: the source tree it was built from, or the installed
// share directory.
std::filesystem::path shipped_data(const std::filesystem::path& relative);

struct TrainDigitsOptions {
  int epochs = 30;
  std::uint64_t seed = 1;
  std::filesystem::path data;                // digits.csv
  std::filesystem::path directory;           // checkpoints, log and chart
  bool fresh = false;                        // ignore checkpoints in directory
  kiln::DType precision = kiln::DType::F32;  // f32, or bf16/f16 mixed precision (autocast)
};
// `kiln train digits`: trains and evaluates the digits classifier.
int run_train_digits(const TrainDigitsOptions& options, std::ostream& out);

struct TrainCharlmOptions {
  std::filesystem::path text;
  std::int64_t steps = 600;
  std::int64_t context = 64;
  std::int64_t sample_every = 100;
  std::uint64_t seed = 1;
  kiln::DType precision = kiln::DType::F32;  // f32, or bf16/f16 mixed precision (autocast)
  std::int64_t width = 96;                   // the model's width (a multiple of its 4 heads)
  // "q8_0", "q4_0" or "q4_k": hold out the text's last tenth, and after training print the
  // validation loss of the float model and of its quantized copy (nn::quantize). Empty: neither.
  std::string quantize;
  // With quantize: train with the weights fake-quantized in that scheme (nn::prepare_qat), so
  // that the quantized copy is the model that was trained.
  bool qat = false;
  // "cuda:0,cuda:1": data-parallel training with one rank per device, each a thread of this
  // process (ProcessGroup::threads; NCCL between GPUs). Empty: the default device, one rank, or
  // a rank of `kiln launch` (ProcessGroup::from_env).
  std::string devices;
};
// `kiln train charlm`: a small character-level transformer on a text file, printing samples.
int run_train_charlm(const TrainCharlmOptions& options, std::ostream& out);

struct EmbedOptions {
  std::filesystem::path model;     // a sentence-transformers model directory
  std::vector<std::string> texts;  // "-": every line of the input, in its place
  std::size_t batch = 32;          // texts per forward pass
};
// `kiln embed MODEL_DIR TEXT...`: one JSON array of the text's embedding per line, in order.
int run_embed(const EmbedOptions& options, std::istream& in, std::ostream& out);

struct FusionBisectOptions {
  double tolerance = 1e-4;           // relative, for numbers in the output
  std::vector<std::string> command;  // CMD ARGS..., run without a shell
};
// `kiln fusion-bisect -- CMD ARGS...`: runs CMD with every fusion group step by step, fused, and
// with fewer groups fused until it finds the first fused group whose result changes CMD's output
// (stdout and exit status). Returns 0 when no group changes it, 1 when one does (named and
// described on out); a command that fails step by step or whose output varies between runs is an
// error (main exits 2).
int run_fusion_bisect(const FusionBisectOptions& options, std::ostream& out);

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;  // PROGRAM ARGS..., run without a shell
};
// `kiln launch --nproc N -- PROGRAM ARGS...`: N ranks of a process group on this host (their
// environment: KILN_RANK, KILN_LOCAL_RANK, KILN_WORLD_SIZE, KILN_STORE), their output on out and
// err, line by line, prefixed "[rank R] ". Returns 0 when every rank exits with 0; ExecutionError
// naming the first rank that fails (the others are stopped).
int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 7878;  // 0: any free port (printed when listening)
  std::string device = "cpu";
  std::filesystem::path token_file;  // required; its first line is the token
  std::uint64_t max_session_bytes = std::uint64_t{16} << 30;
};
// `kiln serve`: runs remote clients' ops on one device until killed. One log line per session.
int run_serve(const ServeOptions& options, std::ostream& out);

}  // namespace kiln::tools
