// `troupe generate`: a sample from a language model's checkpoint, printed
// as it is drawn (models/generate.hpp; docs/USER-GUIDE.md, "Training a
// language model on your own text").
#include <chrono>
#include <cstdio>

#include "cli/commands.hpp"
#include "models/checkpoint/checkpoint.hpp"

namespace troupe::cli {

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  auto* cmd = app.add_subcommand(
      "generate", "Continue a prompt with a language model's checkpoint (trained on --data kjv or text:FILE)");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "Checkpoint file (.troupe), or a --checkpoint-dir: its newest checkpoint")
      ->required();
  cmd->add_option("--prompt", o.prompt, "The text to continue (each byte must be in the model's vocabulary)")
      ->required();
  cmd->add_option("--tokens", o.sample.tokens, "Bytes to generate")->capture_default_str();
  cmd->add_option("--temperature", o.sample.temperature, "Divides the logits: lower is surer, 0 greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", o.sample.top_k, "Draw from the K likeliest bytes only (0: from all)")
      ->capture_default_str();
  cmd->add_option("--seed", o.sample.seed, "Seed of the draws: the same seed gives the same text")
      ->capture_default_str();
  cmd->add_option("--device", o.device, "Device: cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads for the kernels")->capture_default_str();
}

int run_generate(GenerateOptions& o) {
  use_threads(o.threads);
  if (o.sample.tokens < 0) throw UsageError("--tokens must be >= 0");
  if (o.sample.top_k < 0) throw UsageError("--top-k must be >= 0");
  const kernels::Device device = kernels::Device::parse(o.device);
  const std::string checkpoint = checkpoint_file(o.checkpoint);
  const checkpoint::State state = checkpoint::read(checkpoint);
  auto model = models::load_model(state, checkpoint, device);
  models::encode_bytes(model->spec(), o.prompt);  // a prompt it cannot read: exit 2 before printing anything
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = models::generate(*model, o.prompt, o.sample, [](char byte) {
    std::fputc(byte, stdout);
    std::fflush(stdout);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n");
  std::fprintf(stderr, "generate: %zu bytes in %.2f s (%.0f bytes/s; context %lld, no KV cache) from %s (step %llu)\n",
               text.size(), seconds, seconds > 0 ? double(text.size()) / seconds : 0.0,
               static_cast<long long>(model->input_shape()[0]), checkpoint.c_str(),
               static_cast<unsigned long long>(state.position.global_step));
  return 0;
}

}  // namespace troupe::cli
