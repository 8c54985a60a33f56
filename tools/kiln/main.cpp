// The kiln command line: `kiln info`, `kiln train digits`, `kiln train charlm [FILE]`,
// `kiln embed MODEL_DIR TEXT...`, `kiln fusion-bisect -- CMD ARGS...`,
// `kiln serve --token-file FILE [--host H] [--port P] [--device D]`,
// `kiln launch --nproc N -- PROGRAM ARGS...`, `kiln tune list|clear`.
// One error exit: whatever goes wrong (a bad option, kiln's errors, the file system's, memory)
// ends as one line "kiln: ..." on stderr and exit status 1 (2 for fusion-bisect, whose 1 means
// "found a group", as for diff and git bisect run).
#include <kiln/kiln.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <new>
#include <string_view>

#include "tools/kiln/commands.h"

namespace {

using namespace kiln::tools;

// A mistake in the command line itself; printed as it is, without an [op] prefix.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string command_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// CLI11 reports an unknown command as "A subcommand is required" or as an unexpected
// argument; walking the words before the first option names it instead.
void check_commands(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.starts_with("-")) return;  // options, --help included, are CLI11's to judge
    CLI::App* next = nullptr;
    for (CLI::App* sub : level->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) {
      if (level->get_subcommands([](CLI::App*) { return true; }).empty()) return;  // arguments
      throw UsageError("unknown command '" + path + word + "'; " + path +
                       "commands: " + command_names(*level));
    }
    path += word + " ";
    level = next;
  }
  if (level->get_require_subcommand_min() > 0) {
    throw UsageError((path.empty() ? "a command is required"
                                   : "'" + path.substr(0, path.size() - 1) + "' needs a command") +
                     "; " + path + "commands: " + command_names(*level) +
                     " (kiln --help shows the usage)");
  }
}

// CLI11 reads "-1" into an unsigned option as 2^64 - 1; a seed is refused instead.
const CLI::Validator kNonNegative(
    [](const std::string& text) {
      return text.starts_with("-") ? "must be a non-negative integer, got " + text : std::string();
    },
    "NONNEGATIVE");

// --precision f32|bf16|f16: the forward passes' dtype (kiln/autocast.h for the mixed ones).
void add_precision_option(CLI::App* command, kiln::DType& precision) {
  command
      ->add_option_function<std::string>(
          "--precision",
          [&precision](const std::string& name) {
            precision = name == "bf16"  ? kiln::DType::BF16
                        : name == "f16" ? kiln::DType::F16
                                        : kiln::DType::F32;
          },
          "f32, or bf16/f16 mixed precision (products in the low type, the rest in f32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->default_str("f32");
}

int run(int argc, char** argv) {
  CLI::App app{"kiln: tensors, autodiff and training in C++"};
  app.require_subcommand(1);

  app.add_subcommand("info", "version, backends, devices and dtype support");

  CLI::App* train = app.add_subcommand("train", "train one of the example models");
  train->require_subcommand(1);
  TrainDigitsOptions digits;
  digits.data = shipped_data("data/digits/digits.csv");
  digits.directory = "runs/digits";
  CLI::App* digits_cmd =
      train->add_subcommand("digits", "a classifier of the UCI handwritten digits");
  digits_cmd
      ->add_option("--epochs", digits.epochs,
                   "training epochs (more than a run in --out "
                   "had extends it)")
      ->capture_default_str();
  digits_cmd->add_option("--seed", digits.seed, "seed of the split, initialisation and order")
      ->check(kNonNegative)
      ->capture_default_str();
  digits_cmd->add_option("--data", digits.data, "the digits CSV")->capture_default_str();
  digits_cmd->add_option("--out", digits.directory, "checkpoints, log.csv and chart.svg go here")
      ->capture_default_str();
  digits_cmd->add_flag("--fresh", digits.fresh, "start over instead of resuming from --out");
  add_precision_option(digits_cmd, digits.precision);

  TrainCharlmOptions charlm;
  charlm.text = shipped_data("data/charlm/kiln.txt");
  CLI::App* charlm_cmd =
      train->add_subcommand("charlm", "a character-level transformer on a text file");
  charlm_cmd->add_option("file", charlm.text, "the text to learn (at most 1 GiB)")
      ->capture_default_str();
  charlm_cmd->add_option("--steps", charlm.steps, "optimizer steps")->capture_default_str();
  charlm_cmd->add_option("--context", charlm.context, "characters of context (2 to 1024)")
      ->capture_default_str();
  charlm_cmd->add_option("--sample-every", charlm.sample_every, "steps between samples")
      ->capture_default_str();
  charlm_cmd->add_option("--seed", charlm.seed, "seed")->check(kNonNegative)->capture_default_str();
  add_precision_option(charlm_cmd, charlm.precision);
  charlm_cmd->add_option("--width", charlm.width, "the model's width (a multiple of 4, to 1024)")
      ->capture_default_str();
  charlm_cmd
      ->add_option("--quantize", charlm.quantize,
                   "hold out the text's last tenth and compare the validation loss of the float "
                   "model and its quantized weights: q8_0, q4_0 or q4_k")
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_k"}));
  charlm_cmd->add_flag("--qat", charlm.qat,
                       "with --quantize: quantization-aware training (the weights fake-quantized "
                       "in that scheme while training)");
  charlm_cmd->add_option("--devices", charlm.devices,
                         "train data-parallel, a rank per device of this comma-separated list "
                         "(cuda:0,cuda:1), each with its share of every batch");

  EmbedOptions embed;
  CLI::App* embed_cmd = app.add_subcommand(
      "embed", "sentence embeddings of texts with a sentence-transformers model directory");
  embed_cmd
      ->add_option("model", embed.model, "the model directory (modules.json, config.json, ...)")
      ->required();
  embed_cmd->add_option("texts", embed.texts, "the texts; - reads one text per line of stdin")
      ->required();
  embed_cmd->add_option("--batch", embed.batch, "texts per forward pass")->capture_default_str();

  FusionBisectOptions bisect;
  CLI::App* bisect_cmd = app.add_subcommand(
      "fusion-bisect", "find the first fused group whose result changes CMD's output");
  bisect_cmd->add_option("--tolerance", bisect.tolerance, "relative tolerance for numbers")
      ->capture_default_str();
  bisect_cmd->add_option("command", bisect.command, "-- CMD ARGS...: the program to run")
      ->required();

  LaunchOptions launch;
  CLI::App* launch_cmd = app.add_subcommand(
      "launch", "run PROGRAM as N processes, the ranks of a process group (data parallel)");
  launch_cmd->add_option("--nproc", launch.nproc, "processes (ranks) to start")
      ->check(CLI::Range(1, 1024))
      ->required();
  launch_cmd->add_option("command", launch.command, "-- PROGRAM ARGS...: what each rank runs")
      ->required();

  ServeOptions serve;
  CLI::App* serve_cmd =
      app.add_subcommand("serve", "run remote clients' ops (remote://HOST:PORT devices) here");
  serve_cmd->add_option("--host", serve.host, "the address to listen on")->capture_default_str();
  serve_cmd->add_option("--port", serve.port, "the port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve_cmd->add_option("--device", serve.device, "cpu, cuda or cuda:N")->capture_default_str();
  serve_cmd->add_option("--token-file", serve.token_file, "a file whose first line is the token")
      ->required();
  serve_cmd
      ->add_option("--max-session-bytes", serve.max_session_bytes,
                   "memory one client may hold on the device")
      ->capture_default_str();

  std::string tune_action;
  CLI::App* tune_cmd = app.add_subcommand(
      "tune", "show (list) or reset (clear) the autotune cache of measured choices");
  tune_cmd->add_option("tune-action", tune_action, "list or clear")
      ->check(CLI::IsMember({"list", "clear"}))
      ->required();

  check_commands(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (app.got_subcommand("info")) return run_info(std::cout);
  if (digits_cmd->parsed()) return run_train_digits(digits, std::cout);
  if (charlm_cmd->parsed()) return run_train_charlm(charlm, std::cout);
  if (embed_cmd->parsed()) return run_embed(embed, std::cin, std::cout);
  if (bisect_cmd->parsed()) return run_fusion_bisect(bisect, std::cout);
  if (serve_cmd->parsed()) return run_serve(serve, std::cout);
  if (tune_cmd->parsed()) return run_tune(tune_action, std::cout);
  if (launch_cmd->parsed()) return run_launch(launch, std::cout, std::cerr);
  return 0;
}

// Messages on one line, whatever their source put in them.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

int error_status = 1;

int report(const std::string& message) {
  std::cout.flush();
  std::cerr << "kiln: " << one_line(message) << "\n";
  return error_status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "fusion-bisect") error_status = 2;
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    return report("out of memory");
  } catch (const std::exception& e) {
    return report(e.what());
  } catch (...) {
    return report("an unknown error");
  }
}
