// Autotuning: where kiln has several ways to run an op (cuBLASLt's candidate algorithms, kernel
// variants), it measures them once per key and remembers the choice on disk, so a warm process
// measures nothing. A key names the op, its shape class and dtypes, and the machine it was measured
// on (for a GPU: architecture, SM count, driver and CUDA versions) with kiln's version; the file is
// $XDG_CACHE_HOME/kiln/autotune.tsv (else ~/.cache/kiln/autotune.tsv; never the working
// directory). Candidate 0 is always the library's own heuristic choice; another is kept only when
// it beats that one by kAutotuneMargin, so noise never trades a good default for an equal one.
// KILN_AUTOTUNE=0 turns autotuning off: the heuristics alone, no cache read or written.
// `kiln tune list` and `kiln tune clear` show and reset the cache.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::autotune {

// A candidate must take at most this share of the heuristic's time to replace it.
inline constexpr double kAutotuneMargin = 0.97;

struct Choice {
  std::string key;
  std::string choice;       // the candidate's own encoding (an algorithm's bytes, a name)
  double heuristic_us = 0;  // the heuristic's measured time
  double chosen_us = 0;     // the chosen candidate's (the heuristic's own when it won)
  bool operator==(const Choice&) const = default;
};

// False when KILN_AUTOTUNE=0.
bool enabled();
// The cache file; empty when there is neither XDG_CACHE_HOME nor HOME.
std::string cache_path();
// Uses path as the cache file from now on and forgets what this process had read (for tests,
// which must not touch the user's cache).
void set_cache_path(std::string path);
// The remembered choice of key, from this process's table (filled from the file on first use).
std::optional<Choice> find(std::string_view key);
// Remembers a choice in this process and in the file (rewritten whole, atomically; best effort:
// a cache that cannot be written only costs a measurement next time).
void remember(const Choice& choice);
// Every remembered choice, the file's and this process's, sorted by key.
std::vector<Choice> entries();
// Forgets every choice, in this process and on disk.
void clear();

// The choice for key: the remembered one, else measured now. seconds(i) times candidate i (the
// caller repeats and takes a median as it sees fit); encode(i) is what remember() keeps. Returns
// the chosen candidate's encoding; with autotuning off, encode(0) without measuring.
std::string choose(std::string_view key, int candidates, const std::function<double(int)>& seconds,
                   const std::function<std::string(int)>& encode);

// Measures the candidates now (whatever is remembered) and remembers the choice; as choose.
std::string measure(std::string_view key, int candidates, const std::function<double(int)>& seconds,
                    const std::function<std::string(int)>& encode);

// Bytes as lowercase hex, and back (nullopt for anything else); how opaque library structs
// (cuBLASLt's algorithm) are kept in the file.
std::string to_hex(const void* data, std::size_t size);
bool from_hex(std::string_view hex, void* data, std::size_t size);

}  // namespace kiln::autotune
