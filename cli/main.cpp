// troupe: the command-line entry point.
//
//   troupe train --model cnn --data fashion-mnist --epochs 2
//   troupe eval --checkpoint runs/ckpt/ckpt-000000001874.troupe
//   troupe predict --checkpoint CK --limit 100 --output predictions.json
//   troupe export --checkpoint CK --format onnx --output model.onnx
//   troupe node --listen 127.0.0.1:7000 --job job.toml --min-nodes 3
//   troupe node --join 127.0.0.1:7000
//   troupe --version          (also `troupe version`: the version and how it was built)
//
// Exit status (docs/TRAINING.md, "Exit status"):
//   0    success (also --help and --version)
//   1    a runtime error: missing or corrupt data, a corrupt checkpoint, a
//        lost node, a control endpoint that does not answer
//   2    a usage or configuration error: an unknown command or option, a bad
//        value, a model that cannot take the data; nothing was trained
//   130  stopped by SIGINT (Ctrl-C), 143 by SIGTERM: 128 + the signal, as a
//        shell reports a process the signal killed; training stopped at a
//        step boundary and wrote a checkpoint when it had a directory
// Every error is one line on stderr that starts with "troupe:" and names the
// command, flag, file or value that was wrong.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "job/replica.hpp"
#include "kernels/config.hpp"
#include "models/data/load.hpp"

namespace {

// Optimal string alignment distance: Levenshtein plus the transposition of
// two neighbours, so "trian" is one edit from "train".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidate nearest to `word`, when it is near enough to be what the
// user meant: at most one edit for short words, two for longer ones
// (leading dashes do not count).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const auto bare = [](const std::string& w) { return w.substr(std::min(w.find_first_not_of('-'), w.size())); };
  const std::size_t limit = bare(word).size() <= 4 ? 1 : 2;
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(bare(word), bare(c));
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "troupe", "troupe train", "troupe ctl": how the user calls `app`.
std::string command_path(const CLI::App* app) {
  std::string path;
  for (; app != nullptr; app = app->get_parent())
    path = (app->get_parent() == nullptr ? std::string("troupe") : app->get_name()) + (path.empty() ? "" : " ") + path;
  return path;
}

std::vector<std::string> subcommand_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// "--epochs", "-h": every spelling of every option of `app` and of the
// commands above it (CLI11 lets a command's options follow a subcommand's).
std::vector<std::string> option_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr; app = app->get_parent())
    for (const CLI::Option* o : app->get_options()) {
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
      for (const auto& n : o->get_snames()) names.push_back("-" + n);
    }
  return names;
}

// One line for a command-line error CLI11 found, in troupe's words: an
// unknown command or option with the nearest real one, a missing command
// with the list, anything else as CLI11 says it.
std::string parse_error_line(const CLI::App& app, const CLI::ParseError& e) {
  // The deepest command the parser entered, and what it could not place.
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  std::vector<std::string> leftover;
  const CLI::App* owner = command;  // the command the leftover was given to
  for (; owner != nullptr; owner = owner->get_parent())
    if (!(leftover = owner->remaining()).empty()) break;
  const std::vector<std::string> subcommands = subcommand_names(command);
  const std::string where = command_path(command);

  if (!leftover.empty()) {
    const std::string& arg = leftover.front();
    if (arg.size() > 1 && arg[0] == '-' && arg != "--") {
      const std::string flag = arg.substr(0, arg.find('='));
      const std::vector<std::string> own = option_names(command);
      if (owner != command && std::find(own.begin(), own.end(), flag) != own.end())
        return flag + " is an option of '" + where + "': give it after '" + command->get_name() + "'";
      const std::string guess = nearest(flag, own);
      if (!guess.empty()) return "unknown option " + flag + "; did you mean " + guess + "?";
      return "unknown option " + flag + " for '" + where + "' ('" + where + " --help' lists them)";
    }
    if (!subcommands.empty()) {
      const std::string what = command->get_parent() == nullptr ? "command" : command->get_name() + " command";
      const std::string guess = nearest(arg, subcommands);
      if (!guess.empty()) return "unknown " + what + " '" + arg + "'; did you mean '" + guess + "'?";
      return "unknown " + what + " '" + arg + "'; expected one of: " + joined(subcommands);
    }
    return "unexpected argument '" + arg + "' for '" + where + "' ('" + where + " --help' lists its options)";
  }
  if (!subcommands.empty() && command->get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&e))
    return "'" + where + "' needs a command: " + joined(subcommands) + " ('" + where + " --help' says more)";
  return e.what();
}

}  // namespace

int run_troupe(int argc, char** argv) {
  CLI::App app{"troupe " TROUPE_VERSION ": a distributed deep-learning trainer on the actor model"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", [] { return troupe::cli::version_text(); },
      "Print the version and how this binary was built, and exit");
  app.footer("Run 'troupe COMMAND --help' for a command's options.");

  troupe::cli::TrainOptions train;
  troupe::cli::add_train_command(app, train);
  troupe::cli::EvalOptions eval;
  troupe::cli::add_eval_command(app, eval);
  troupe::cli::PredictOptions predict;
  troupe::cli::add_predict_command(app, predict);
  troupe::cli::ExportOptions export_options;
  troupe::cli::add_export_command(app, export_options);
  troupe::cli::CtlOptions ctl;
  troupe::cli::add_ctl_command(app, ctl);
  troupe::cli::NodeOptions node;
  troupe::cli::add_node_command(app, node);
  troupe::cli::GenerateOptions generate;
  troupe::cli::add_generate_command(app, generate);
  app.add_subcommand("version", "Print the version and how this binary was built (as --version)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "troupe: %s\n", parse_error_line(app, e).c_str());
    return 2;
  }

  try {
    if (app.got_subcommand("version")) {
      std::printf("%s\n", troupe::cli::version_text().c_str());
      return 0;
    }
    if (app.got_subcommand("train")) return troupe::cli::run_train(train);
    if (app.got_subcommand("eval")) return troupe::cli::run_eval(eval);
    if (app.got_subcommand("predict")) return troupe::cli::run_predict(predict);
    if (app.got_subcommand("export")) return troupe::cli::run_export(export_options);
    if (app.got_subcommand("ctl")) return troupe::cli::run_ctl(ctl);
    if (app.got_subcommand("node")) return troupe::cli::run_node(node);
    if (app.got_subcommand("generate")) return troupe::cli::run_generate(generate);
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

int main(int argc, char** argv) {
  const int status = run_troupe(argc, argv);
  // A job's actor system that could not shut down was left behind with its
  // threads blocked inside CAF (job/replica.hpp, run_with_bounded_shutdown):
  // exit without running static destructors under them.
  if (troupe::actors::abandoned_actor_systems() > 0) {
    std::fflush(nullptr);
    std::_Exit(status);
  }
  return status;
}
