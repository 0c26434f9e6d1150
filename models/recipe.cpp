#include "models/recipe.hpp"

#include <cstdio>
#include <vector>

namespace troupe::models {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

bool Recipe::empty() const {
  return !batch && !optimizer && !lr && !momentum && !weight_decay && !nesterov && !schedule && !warmup_epochs &&
         !beta2 && !clip_norm && !warmup_steps;
}

std::string Recipe::describe() const {
  std::vector<std::string> parts;
  if (optimizer) {
    std::string o = *optimizer;
    if (nesterov && *nesterov) o += " nesterov";
    if (momentum) o += " momentum " + number(*momentum);
    parts.push_back(o);
  } else {
    if (nesterov) parts.push_back(*nesterov ? "nesterov" : "no nesterov");
    if (momentum) parts.push_back("momentum " + number(*momentum));
  }
  if (beta2) parts.push_back("beta2 " + number(*beta2));
  if (lr) parts.push_back("lr " + number(*lr));
  if (warmup_epochs) parts.push_back("warm-up " + number(*warmup_epochs) + " epoch(s)");
  if (warmup_steps) parts.push_back("warm-up " + std::to_string(*warmup_steps) + " steps");
  if (schedule) parts.push_back("schedule " + *schedule);
  if (weight_decay) parts.push_back("weight decay " + number(*weight_decay));
  if (clip_norm) parts.push_back("clip norm " + number(*clip_norm));
  if (batch) parts.push_back("batch " + std::to_string(*batch));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

Recipe zoo_recipe(const std::string& model) {
  Recipe r;
  if (model == "resnet") {
    // torch_resnet.py: SGD Nesterov 0.9, lr 0.1 warmed up linearly over the
    // first epoch, then cosine to 0 at the last step; weight decay 5e-4 on
    // kernels only (TrainConfig's rank >= 2 rule); batch 128.
    r.optimizer = "sgd";
    r.nesterov = true;
    r.momentum = 0.9f;
    r.lr = 0.1f;
    r.warmup_epochs = 1;
    r.schedule = "warmup-cosine";
    r.weight_decay = 5e-4f;
    r.batch = 128;
  } else if (model == "gpt") {
    // torch_gpt.py (nanoGPT's shakespeare_char): AdamW 1e-3, betas (0.9,
    // 0.99), weight decay 0.1 on matrices (rank >= 2: kernels and both
    // embedding tables), global-norm clip 1.0, 100 warm-up steps then
    // cosine to 1e-4 at the last step, batch 12.
    r.optimizer = "adamw";
    r.lr = 1e-3f;
    r.beta2 = 0.99f;
    r.weight_decay = 0.1f;
    r.clip_norm = 1.0f;
    r.warmup_steps = 100;
    r.schedule = "warmup-cosine:/0.1";
    r.batch = 12;
  }
  return r;
}

std::string apply_recipe(TrainConfig& c, const std::function<bool(const std::string& key)>& given) {
  const Recipe r = zoo_recipe(c.model);
  Recipe applied;
  const bool own_optimizer = given("optimizer");
  if (r.optimizer && !own_optimizer) c.optimizer.name = *(applied.optimizer = r.optimizer);
  if (!own_optimizer) {
    if (r.lr && !given("lr")) c.lr = *(applied.lr = r.lr);
    if (r.momentum && !given("momentum")) c.optimizer.momentum = *(applied.momentum = r.momentum);
    if (r.nesterov && !given("nesterov")) c.optimizer.nesterov = *(applied.nesterov = r.nesterov);
    if (r.weight_decay && !given("weight_decay")) c.optimizer.weight_decay = *(applied.weight_decay = r.weight_decay);
    if (r.beta2 && !given("beta2")) c.optimizer.beta2 = *(applied.beta2 = r.beta2);
  }
  if (r.clip_norm && !given("clip_norm")) c.optimizer.clip_norm = *(applied.clip_norm = r.clip_norm);
  if (r.schedule && !given("schedule")) c.schedule = *(applied.schedule = r.schedule);
  if (r.warmup_epochs && !given("warmup")) {
    c.warmup_epochs = *(applied.warmup_epochs = r.warmup_epochs);
    c.warmup_from_recipe = true;
  }
  if (r.warmup_steps && !given("warmup")) {
    c.warmup_steps = *(applied.warmup_steps = r.warmup_steps);
    c.warmup_from_recipe = true;
  }
  if (r.batch && !given("batch")) c.batch = *(applied.batch = r.batch);
  return applied.describe();
}

}  // namespace troupe::models
