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
  return !batch && !optimizer && !lr && !momentum && !weight_decay && !nesterov && !schedule && !warmup_epochs;
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
  if (lr) parts.push_back("lr " + number(*lr));
  if (warmup_epochs) parts.push_back("warm-up " + number(*warmup_epochs) + " epoch(s)");
  if (schedule) parts.push_back("schedule " + *schedule);
  if (weight_decay) parts.push_back("weight decay " + number(*weight_decay));
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
  }
  if (r.schedule && !given("schedule")) c.schedule = *(applied.schedule = r.schedule);
  if (r.warmup_epochs && !given("warmup")) {
    c.warmup_epochs = *(applied.warmup_epochs = r.warmup_epochs);
    c.warmup_from_recipe = true;
  }
  if (r.batch && !given("batch")) c.batch = *(applied.batch = r.batch);
  return applied.describe();
}

}  // namespace troupe::models
