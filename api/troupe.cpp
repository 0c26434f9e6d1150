// The public API's strategies (fit and control of a running actors::Job),
// callbacks and model utilities. The custom training loop is in
// custom_loop.cpp.
#include "troupe/troupe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "actors/mode.hpp"
#include "cluster/node.hpp"
#include "job/job.hpp"
#include "job/job_file.hpp"
#include "kernels/registry.hpp"
#include "models/checkpoint/checkpoint.hpp"
#include "net/cluster/auth.hpp"  // check_clear_links
#include "net/cluster/cluster_spec.hpp"
#include "net/cluster/launcher_env.hpp"

namespace troupe {

namespace {

// True on a thread while it runs one of the user's fit() callbacks: the
// coordinator's thread, which a blocking control request would deadlock.
thread_local bool in_fit_callback = false;

struct CallbackScope {
  CallbackScope() { in_fit_callback = true; }
  ~CallbackScope() { in_fit_callback = false; }
};

}  // namespace

// ---- vocabulary ---------------------------------------------------------------

std::vector<Device> parse_devices(const std::string& text) { return actors::parse_devices(text); }
std::vector<Device> default_devices() { return actors::default_devices(); }
int cuda_device_count() { return kernels::cuda_device_count(); }

void set_cpu_threads(int threads) {
  if (threads < 1)
    throw std::invalid_argument("set_cpu_threads: threads must be at least 1, got " + std::to_string(threads));
  kernels::Registry::instance().for_device(Device::cpu()).set_threads(threads);
}

Splits load_data(const std::string& name_or_path, const data::LoadOptions& options) {
  return data::load_dataset(name_or_path, options);
}

namespace {
void put_u32(std::ofstream& out, std::uint32_t v) {
  const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.write(b, 4);
}

void write_idx_split(const Dataset& d, const std::string& dir, const std::string& prefix, std::int64_t max) {
  const Shape f = d.feature_shape();
  if (d.task != data::Task::classification || f.rank() != 3 || f[0] != 1 || d.features.dtype() != kernels::DType::f32 ||
      d.num_classes > 256)
    throw std::invalid_argument("write_idx_subset: " + d.describe() +
                                " is not a set of 1-channel images with <= 256 classes");
  const std::int64_t n = std::min(max, d.size());
  const std::string images = dir + "/" + prefix + "-images-idx3-ubyte",
                    labels = dir + "/" + prefix + "-labels-idx1-ubyte";
  std::ofstream xi(images, std::ios::binary | std::ios::trunc), yi(labels, std::ios::binary | std::ios::trunc);
  if (!xi) throw std::runtime_error("write_idx_subset: cannot create " + images);
  if (!yi) throw std::runtime_error("write_idx_subset: cannot create " + labels);
  const std::int64_t pixels = f.numel();
  const std::vector<float> x = d.features.slice(0, Shape{n * pixels}).to_vector();
  const auto* y = static_cast<const std::int32_t*>(d.labels.raw());  // host memory
  put_u32(xi, 0x803);
  put_u32(xi, std::uint32_t(n));
  put_u32(xi, std::uint32_t(f[1]));
  put_u32(xi, std::uint32_t(f[2]));
  std::string bytes(static_cast<std::size_t>(n * pixels), '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(static_cast<unsigned char>(std::lround(std::clamp(x[i], 0.0f, 1.0f) * 255.0f)));
  xi.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  put_u32(yi, 0x801);
  put_u32(yi, std::uint32_t(n));
  for (std::int64_t i = 0; i < n; ++i) yi.put(static_cast<char>(y[i]));
  if (!xi.flush()) throw std::runtime_error("write_idx_subset: writing " + images + " failed");
  if (!yi.flush()) throw std::runtime_error("write_idx_subset: writing " + labels + " failed");
}
}  // namespace

std::string write_idx_subset(const Splits& splits, const std::string& dir, std::int64_t max_train,
                             std::int64_t max_test) {
  if (max_train < 1 || max_test < 1)
    throw std::invalid_argument("write_idx_subset: max_train and max_test must be >= 1");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("write_idx_subset: cannot create " + dir + ": " + ec.message());
  write_idx_split(splits.train, dir, "train", max_train);
  write_idx_split(splits.test, dir, "t10k", max_test);
  return dir;
}

ModelSpec model_spec(const std::string& name_or_path, const Dataset& dataset) {
  return models::resolve_model(name_or_path, models::data_shape_of(dataset));
}

// ---- saving, loading, evaluating ------------------------------------------------

void save_model(const Model& model, const std::string& path) {
  checkpoint::State s;
  s.model.name = model.spec().name;
  s.model.spec = model.spec().text();
  s.parameters = model.parameters().to_vector();
  s.model_state = model.state().to_vector();
  s.metrics_note = "saved by troupe::save_model";
  checkpoint::write(path, s);
}

std::unique_ptr<Model> load_model(const std::string& path, Device device) {
  return models::load_model(checkpoint::read(path), path, device);
}

std::optional<std::string> latest_checkpoint(const std::string& dir) { return checkpoint::Directory(dir, 0).latest(); }

EpochResult evaluate(Model& model, const Dataset& dataset, std::int64_t batch) {
  if (batch < 1) throw std::invalid_argument("evaluate: batch must be at least 1");
  return models::evaluate_model(model, dataset, batch);
}

// ---- callbacks --------------------------------------------------------------------

void PrintLR::on_epoch_end(const EpochResult& r) {
  std::printf("Learning rate for epoch %lld is %g\n", static_cast<long long>(r.epoch + 1), double(r.lr));
  std::fflush(stdout);
}

struct CsvLogger::File {
  std::ofstream out;
};

CsvLogger::CsvLogger(const std::string& path, bool every_evaluation)
    : file_(std::make_unique<File>()), every_evaluation_(every_evaluation) {
  file_->out.open(path, std::ios::trunc);
  if (!file_->out) throw std::runtime_error("CsvLogger: cannot create " + path);
  file_->out << (every_evaluation_ ? "kind," : "")
             << "epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,test_top5,test_mae,lr,seconds,"
                "samples_per_s\n";
  file_->out.flush();
}

CsvLogger::~CsvLogger() = default;

namespace {
// An empty cell where a figure was not measured (NaN: no test data,
// accuracy in regression), as a spreadsheet or pandas reads a missing value.
struct Cell {
  double value;
};
std::ostream& operator<<(std::ostream& out, Cell c) {
  if (!std::isnan(c.value)) out << c.value;
  return out;
}

void csv_row(std::ofstream& out, const char* kind, const EpochResult& r) {
  if (kind) out << kind << ',';
  out << r.epoch << ',' << r.step << ',' << Cell{r.train_loss} << ',' << Cell{r.train_accuracy} << ','
      << Cell{r.test_loss} << ',' << Cell{r.test_accuracy} << ',' << Cell{r.test_top5} << ',' << Cell{r.test_mae} << ','
      << r.lr << ',' << r.seconds << ',' << r.samples_per_s << '\n';
  out.flush();
}
}  // namespace

void CsvLogger::on_epoch_end(const EpochResult& r) { csv_row(file_->out, every_evaluation_ ? "epoch" : nullptr, r); }

void CsvLogger::on_evaluate(const EpochResult& r) {
  // Epoch ends arrive through on_epoch_end too; log only the others here.
  if (every_evaluation_) csv_row(file_->out, "eval", r);
}

TensorBoard::TensorBoard(const std::string& dir, std::int64_t log_every)
    : log_(std::make_unique<models::TensorBoardLog>(dir, log_every)) {}
TensorBoard::~TensorBoard() = default;
void TensorBoard::on_epoch_begin(std::int64_t, float lr) { log_->epoch_begin(lr); }
void TensorBoard::on_step_end(const StepLogs& l) { log_->step_end(l); }
void TensorBoard::on_epoch_end(const EpochResult& r) { log_->epoch_end(r); }
void TensorBoard::on_evaluate(const EpochResult& r) { log_->evaluation(r); }
void TensorBoard::on_train_end(const History& h) {
  log_->record_mode_history(h.mode_history);
  log_->final_evaluation(h.final);
}
std::string TensorBoard::path() const { return log_->path(); }
void TensorBoard::set_job(const std::string& config_text, const std::string& mode, std::int64_t replicas) {
  log_->set_job(config_text, mode, replicas);
}

void ProgressLogger::on_step_end(const StepLogs& l) {
  if (log_every_ > 0 && l.step % log_every_ == 0) {
    std::printf("step %lld  loss %.4f  %.0f samples/s\n", static_cast<long long>(l.step), l.loss, l.samples_per_s);
    std::fflush(stdout);
  }
}

void ProgressLogger::on_epoch_end(const EpochResult& r) {
  // The actor runtime does not measure training accuracy (NaN): left out then.
  char train_accuracy[48] = "";
  if (!std::isnan(r.train_accuracy))
    std::snprintf(train_accuracy, sizeof train_accuracy, "  accuracy %.4f", r.train_accuracy);
  char test[96];
  if (!r.has_test())
    std::snprintf(test, sizeof test, "no test data");
  else if (r.regression)
    std::snprintf(test, sizeof test, "test mse %.4f  mae %.4f", r.test_loss, r.test_mae);
  else
    std::snprintf(test, sizeof test, "test loss %.4f  test accuracy %.4f  top-5 %.4f", r.test_loss, r.test_accuracy,
                  r.test_top5);
  std::printf("epoch %lld  step %lld  loss %.4f%s  %s  lr %g  %.1f s  %.0f samples/s\n",
              static_cast<long long>(r.epoch + 1), static_cast<long long>(r.step), r.train_loss, train_accuracy, test,
              double(r.lr), r.seconds, r.samples_per_s);
  std::fflush(stdout);
}

// ---- strategies -------------------------------------------------------------------

Strategy::Strategy(std::vector<Device> devices, const std::string& mode)
    : devices_(devices.empty() ? actors::default_devices() : std::move(devices)),
      mode_(actors::Mode::parse(mode).str()) {
  for (std::size_t i = 0; i < devices_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (devices_[i] == devices_[j])
        throw std::invalid_argument("strategy: device " + devices_[i].str() + " named twice");
}

Strategy::~Strategy() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& t : pending_)
    if (t.joinable()) t.join();
}

std::string Strategy::mode() const { return mode_; }

History Strategy::fit_as_worker(const FitConfig&) {
  throw std::logic_error("Strategy::fit_as_worker: not a cluster strategy");
}

History Strategy::fit(const FitConfig& config, const CallbackList& callbacks) {
  if (is_worker_node()) return fit_as_worker(config);
  actors::JobConfig jc;
  jc.train = static_cast<const models::TrainConfig&>(config);
  jc.train.update_mode = mode_;
  jc.devices = devices_;
  jc.mode = actors::Mode::parse(mode_);
  jc.switches = actors::parse_switch_schedule(config.switches);
  jc.threads_per_device = config.threads_per_device;
  jc.prefetch = config.prefetch;
  jc.ps_shards = config.ps_shards;  // checked by the Job (at least 1)
  jc.ps_split_above = config.ps_split_above;
  jc.collect_replica_parameters = true;  // History::model
  configure_job(jc);
  auto job = std::make_shared<actors::Job>(jc);  // configuration errors surface here
  for (const auto& c : callbacks)
    if (auto* tb = dynamic_cast<TensorBoard*>(c.get()))
      tb->set_job(actors::to_job_text(jc), mode_, jc.cluster ? 0 : static_cast<std::int64_t>(jc.devices.size()));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_) throw std::logic_error("Strategy::fit: a fit() is already running on this strategy");
    job_ = job;
  }
  struct Clear {
    Strategy* s;
    ~Clear() {
      std::vector<std::thread> pending;
      {
        std::lock_guard<std::mutex> lock(s->mutex_);
        s->job_.reset();
        pending.swap(s->pending_);
      }
      for (auto& t : pending) t.join();  // each ends within seconds once the job stopped
    }
  } clear{this};

  History h;
  std::exception_ptr callback_error;
  std::atomic<bool> callback_failed{false};
  std::int64_t last_step = 0;
  // Every user callback runs through here: marked as "inside a callback"
  // (so switch_mode does not block), and an exception stops the job instead
  // of taking the coordinator down; fit() rethrows it.
  auto each = [&](auto&& call) {
    if (callback_failed.load()) return;
    CallbackScope scope;
    try {
      for (const auto& c : callbacks)
        if (c) call(*c);
    } catch (...) {
      callback_error = std::current_exception();
      callback_failed.store(true);
    }
  };
  models::Callbacks cb;
  cb.on_epoch_begin = [&](std::int64_t epoch, std::int64_t, float lr) {
    each([&](Callback& c) { c.on_epoch_begin(epoch, lr); });
    each([&](Callback& c) { c.on_step_begin(last_step + 1); });
  };
  cb.on_step_end = [&](const models::StepEnd& e) {
    last_step = e.step;
    each([&](Callback& c) { c.on_step_end(e); });
    each([&](Callback& c) { c.on_step_begin(e.step + 1); });
  };
  cb.on_epoch_end = [&](const EpochResult& r) {
    h.epochs.push_back(r);
    each([&](Callback& c) { c.on_epoch_end(r); });
  };
  cb.on_evaluate = [&](const EpochResult& r) {
    h.evaluations.push_back(r);
    each([&](Callback& c) { c.on_evaluate(r); });
  };
  cb.on_checkpoint = [&](const std::string& path, std::int64_t step) {
    each([&](Callback& c) { c.on_checkpoint(path, step); });
  };
  stop_requested_.store(false);
  cb.should_stop = [&] { return callback_failed.load() || stop_requested_.load(); };

  each([&](Callback& c) { c.on_train_begin(); });
  actors::JobResult r = job->run(cb);
  if (callback_error) std::rethrow_exception(callback_error);
  if (!r.error.empty()) throw std::runtime_error("fit: " + r.error);

  h.final = r.final;
  h.steps = r.steps;
  h.sync_steps = r.sync_steps;
  h.pushes = r.pushes;
  h.train_seconds = r.train_seconds;
  h.wall_seconds = r.wall_seconds;
  h.samples_per_s = r.samples_per_s;
  h.mode_history = r.mode_history;
  h.final_mode = r.final_mode.str();
  h.stopped_early = r.stopped_early;
  if (!job->replica_parameters().empty()) {
    h.model = std::make_shared<Model>(job->spec(), Device::cpu());
    const std::vector<float>& p = job->replica_parameters()[0];
    h.model->parameters().copy_from(
        Tensor::view(const_cast<float*>(p.data()), h.model->parameters().shape(), kernels::DType::f32, Device::cpu()));
  }
  each([&](Callback& c) { c.on_train_end(h); });
  if (callback_error) std::rethrow_exception(callback_error);
  return h;
}

ControlReply Strategy::switch_mode(const std::string& mode) {
  try {
    actors::Mode::parse(mode);
  } catch (const std::exception& e) {
    return ControlReply{400, e.what()};
  }
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<actors::Job> job = job_;
  if (!job) return ControlReply{409, "no fit() is running on this strategy"};
  if (in_fit_callback) {
    // Job::request_mode waits until run()'s thread forwarded the request and
    // the coordinator reached a step boundary; the coordinator is this
    // thread, so ask from another one and return at once.
    pending_.emplace_back([job, mode] { job->request_mode(mode); });
    return ControlReply{202, "switch to " + mode + " queued for the next step boundary"};
  }
  // Not holding the lock while waiting: fit() may finish meanwhile (the job
  // stays alive through `job`, and then answers 409).
  lock.unlock();
  actors::ControlReply r = job->request_mode(mode);
  return ControlReply{r.status, r.message};
}

std::string Strategy::status() {
  std::shared_ptr<actors::Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job = job_;
  }
  if (!job) return "{\"state\":\"not running\"}";
  if (in_fit_callback) return "{\"state\":\"unavailable inside a fit() callback\"}";
  return job->status();
}

ControlReply Strategy::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!job_) return ControlReply{409, "no fit() is running on this strategy"};
  stop_requested_.store(true);  // the coordinator looks after every step: safe from callbacks too
  return ControlReply{202, "stopping at the next step boundary"};
}

ParameterServerStrategy::ParameterServerStrategy(const std::string& mode, std::vector<Device> devices)
    : Strategy(std::move(devices), mode) {
  if (!actors::Mode::parse(mode).uses_server())
    throw std::invalid_argument("ParameterServerStrategy: mode must be \"async\" or \"ssp:N\", got \"" + mode +
                                "\" (for synchronous training use MirroredStrategy)");
}

// ---- MultiWorkerMirroredStrategy ------------------------------------------------

namespace {

std::chrono::milliseconds millis(double seconds, const char* what) {
  if (!(seconds > 0))
    throw std::invalid_argument(std::string("MultiWorkerMirroredStrategy: ") + what + " must be positive");
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

// Fills listen / join / min_nodes from the spec, when there is one; returns
// (is coordinator, rank, nodes).
struct Role {
  bool coordinator = false;
  int rank = 0, nodes = 1;
  int ps_tasks = 0;  // the spec's ps entries
};

Role resolve_role(ClusterOptions& o) {
  std::optional<net::ClusterSpec> spec;
  if (!o.cluster_spec_file.empty() && !o.cluster_spec_json.empty())
    throw std::invalid_argument("MultiWorkerMirroredStrategy: give a cluster spec file or its JSON, not both");
  if (!o.cluster_spec_json.empty())
    spec = net::parse_cluster_spec(o.cluster_spec_json, "cluster spec");
  else if (!o.cluster_spec_file.empty() || (o.listen.empty() && o.join.empty()))
    spec = net::load_cluster_spec(o.cluster_spec_file);  // the file, else $TROUPE_CLUSTER, else none
  Role role;
  if (spec) {
    if (!o.listen.empty() || !o.join.empty())
      throw std::invalid_argument("MultiWorkerMirroredStrategy: give either listen / join or a cluster spec (" +
                                  spec->source + "), not both");
    if (spec->task_type == "ps")
      throw std::invalid_argument(net::ps_task_refusal(spec->source + ": task ps " + std::to_string(spec->task_index) +
                                                       " (" + spec->self().str() + ")"));
    role.nodes = static_cast<int>(spec->nodes().size());
    role.rank = spec->rank();
    role.ps_tasks = static_cast<int>(spec->ps.size());
    role.coordinator = spec->is_coordinator();
    if (role.coordinator) {
      o.listen = spec->self().str();
      o.min_nodes = role.nodes;
    } else {
      o.join = spec->coordinator().str();
      if (o.data_address.empty()) o.data_address = spec->self().str();
    }
    return role;
  }
  if (o.listen.empty() == o.join.empty())
    throw std::invalid_argument(
        "MultiWorkerMirroredStrategy needs a cluster spec (a file, its JSON, or "
        "$TROUPE_CLUSTER) or exactly one of listen (coordinator) and join (worker)");
  if (o.min_nodes < 1) throw std::invalid_argument("MultiWorkerMirroredStrategy: min_nodes must be at least 1");
  role.coordinator = !o.listen.empty();
  role.rank = role.coordinator ? 0 : 1;  // a worker's rank is assigned on joining; not 0
  role.nodes = o.min_nodes;
  if (!role.coordinator) {
    // The address is checked here rather than on joining.
    (void)net::parse_cluster_address(o.join, "join");
  } else {
    (void)net::parse_cluster_address(o.listen, "listen");
  }
  return role;
}

actors::NodeOptions node_options(const ClusterOptions& o, const std::vector<Device>& devices) {
  actors::NodeOptions n;
  n.listen = o.listen;
  n.join = o.join;
  n.min_nodes = o.min_nodes;
  n.secret_file = o.secret_file;
  n.insecure = o.insecure;
  if (o.insecure) net::check_clear_links(net::Secret::load(o.secret_file), true);
  n.data_address = o.data_address;
  n.devices = devices;
  n.join_timeout = millis(o.join_timeout_s, "join_timeout_s");
  n.wait_timeout = millis(o.wait_timeout_s, "wait_timeout_s");
  n.timeout = millis(o.timeout_s, "timeout_s");
  if (!(o.rejoin_timeout_s >= 0))
    throw std::invalid_argument("MultiWorkerMirroredStrategy: rejoin_timeout_s must be >= 0");
  n.rejoin_timeout = std::chrono::milliseconds(static_cast<long long>(o.rejoin_timeout_s * 1000));
  return n;
}

ClusterOptions resolved(ClusterOptions o, Role& role) {
  role = resolve_role(o);
  return o;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(ClusterOptions options)
    : Strategy(options.devices, options.mode) {
  Role role;
  options_ = resolved(std::move(options), role);
  coordinator_ = role.coordinator;
  task_index_ = role.rank;
  num_workers_ = role.nodes;
  ps_tasks_ = role.ps_tasks;
  node_options(options_, devices());  // checks the timeouts now
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

void MultiWorkerMirroredStrategy::configure_job(actors::JobConfig& job) {
  actors::NodeOptions n = node_options(options_, devices());
  n.threads_per_device = job.threads_per_device;
  n.prefetch = job.prefetch;
  job.timeout = n.timeout;
  n.ps_tasks = ps_tasks_;
  job.cluster = actors::make_coordinator_cluster(n, job);
}

History MultiWorkerMirroredStrategy::fit_as_worker(const FitConfig& config) {
  actors::NodeOptions n = node_options(options_, devices());
  if (config.threads_per_device < 1) throw std::invalid_argument("fit: threads_per_device must be at least 1");
  if (config.prefetch < 1) throw std::invalid_argument("fit: prefetch must be at least 1");
  n.threads_per_device = config.threads_per_device;
  n.prefetch = config.prefetch;
  const auto start = std::chrono::steady_clock::now();
  const int status = actors::run_worker(n);
  if (status != 0)
    throw std::runtime_error("fit: worker node (joining " + n.join + ") ended with status " + std::to_string(status) +
                             "; the reason is logged above");
  History h;
  h.worker = true;
  h.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return h;
}

namespace {
// The spec of `o` (a file, its JSON, or $TROUPE_CLUSTER), or none.
std::optional<net::ClusterSpec> spec_of(const ClusterOptions& o) {
  if (!o.cluster_spec_file.empty() && !o.cluster_spec_json.empty())
    throw std::invalid_argument("give a cluster spec file or its JSON, not both");
  if (!o.cluster_spec_json.empty()) return net::parse_cluster_spec(o.cluster_spec_json, "cluster spec");
  if (!o.cluster_spec_file.empty() || (o.listen.empty() && o.join.empty()))
    return net::load_cluster_spec(o.cluster_spec_file);
  return std::nullopt;
}
}  // namespace

bool is_ps_task(const ClusterOptions& options) {
  const auto spec = spec_of(options);
  return spec && spec->task_type == "ps";
}

int serve_parameter_server(ClusterOptions options) {
  if (const auto spec = spec_of(options)) {
    if (spec->task_type != "ps")
      throw std::invalid_argument("serve_parameter_server: " + spec->source + " makes this task " + spec->task_type +
                                  " " + std::to_string(spec->task_index) +
                                  ", not a ps task (MultiWorkerMirroredStrategy runs chief and worker tasks)");
    options.join = spec->coordinator().str();
    if (options.data_address.empty()) options.data_address = spec->self().str();
  }
  if (options.join.empty())
    throw std::invalid_argument(
        "serve_parameter_server needs a cluster spec with this task in its ps list, or join "
        "(the chief's HOST:PORT)");
  (void)net::parse_cluster_address(options.join, "join");
  actors::NodeOptions n = node_options(options, {});
  return actors::run_ps_task(n);
}

}  // namespace troupe
