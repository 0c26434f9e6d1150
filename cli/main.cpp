// troupe: the command-line entry point.
//
//   troupe train --model cnn --data fashion-mnist --epochs 2
//   troupe eval --checkpoint runs/ckpt/ckpt-000000001874.troupe
//   troupe node --listen 127.0.0.1:7000 --job job.toml --min-nodes 3
//   troupe node --join 127.0.0.1:7000
//
// Exit status: 0 success, 1 a runtime error (missing data, a corrupt
// checkpoint, ...), 2 a usage error (bad flags or values). Errors are one
// line on stderr naming the flag, file or value that was wrong.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "kernels/config.hpp"
#include "models/data/load.hpp"

int main(int argc, char** argv) {
  CLI::App app{"troupe " TROUPE_VERSION ": a distributed deep-learning trainer on the actor model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("troupe ") + TROUPE_VERSION);
  app.footer("Run 'troupe COMMAND --help' for a command's options.");

  troupe::cli::TrainOptions train;
  troupe::cli::add_train_command(app, train);
  troupe::cli::EvalOptions eval;
  troupe::cli::add_eval_command(app, eval);
  troupe::cli::CtlOptions ctl;
  troupe::cli::add_ctl_command(app, ctl);
  troupe::cli::NodeOptions node;
  troupe::cli::add_node_command(app, node);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  try {
    if (app.got_subcommand("train")) return troupe::cli::run_train(train);
    if (app.got_subcommand("eval")) return troupe::cli::run_eval(eval);
    if (app.got_subcommand("ctl")) return troupe::cli::run_ctl(ctl);
    if (app.got_subcommand("node")) return troupe::cli::run_node(node);
  } catch (const troupe::cli::UsageError& e) {
    std::fprintf(stderr, "troupe: %s\n", e.what());
    return 2;
  } catch (const troupe::data::UnknownDatasetError& e) {
    std::fprintf(stderr, "troupe: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "troupe: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: %s\n", e.what());
    return 1;
  }
  return 2;
}
