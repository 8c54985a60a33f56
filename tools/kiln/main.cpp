// The kiln command line: `kiln info`, `kiln train digits`, `kiln train charlm [FILE]`.
#include <kiln/kiln.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/kiln/commands.h"

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app{"kiln: tensors, autodiff and training in C++"};
  app.require_subcommand(1);

  app.add_subcommand("info", "version, backends, devices and dtype support");

  CLI::App* train = app.add_subcommand("train", "train one of the example models");
  train->require_subcommand(1);
  TrainDigitsOptions digits;
  digits.data = shipped_data("data/digits/digits.csv");
  digits.directory = "runs/digits";
  CLI::App* digits_cmd = train->add_subcommand("digits", "a classifier of the UCI handwritten digits");
  digits_cmd->add_option("--epochs", digits.epochs, "training epochs")->capture_default_str();
  digits_cmd->add_option("--seed", digits.seed, "seed of the split, initialisation and order")
      ->capture_default_str();
  digits_cmd->add_option("--data", digits.data, "the digits CSV")->capture_default_str();
  digits_cmd->add_option("--out", digits.directory, "checkpoints, log.csv and chart.svg go here")
      ->capture_default_str();
  digits_cmd->add_flag("--fresh", digits.fresh, "start over instead of resuming from --out");

  TrainCharlmOptions charlm;
  charlm.text = shipped_data("data/charlm/kiln.txt");
  CLI::App* charlm_cmd = train->add_subcommand("charlm", "a character-level transformer on a text file");
  charlm_cmd->add_option("file", charlm.text, "the text to learn")->capture_default_str();
  charlm_cmd->add_option("--steps", charlm.steps, "optimizer steps")->capture_default_str();
  charlm_cmd->add_option("--context", charlm.context, "characters of context")->capture_default_str();
  charlm_cmd->add_option("--sample-every", charlm.sample_every, "steps between samples")
      ->capture_default_str();
  charlm_cmd->add_option("--seed", charlm.seed, "seed")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("info")) return run_info(std::cout);
    if (digits_cmd->parsed()) return run_train_digits(digits, std::cout);
    if (charlm_cmd->parsed()) return run_train_charlm(charlm, std::cout);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
