// Writes the seed corpus of every fuzz target under DIR (fuzz/corpus):
//   fuzz_make_seeds DIR
// Binary seeds are made with troupe's own writers (a checkpoint, frame
// headers, a recorded tcp ring conversation, handshake frames, IDX files);
// text seeds are spelled here so that each input's leading option bytes are
// explicit. Run by `scripts/fuzz.sh --seeds`; the output is committed.
#include <fcntl.h>

// jpeglib.h uses FILE without declaring it.
#include <cstdio>

#include <jpeglib.h>  // defines: jpeg_compress_struct, the JPEG seeds
#include <png.h>      // defines: png_image_write_to_memory, the PNG seeds
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "models/checkpoint/checkpoint.hpp"
#include "models/spec.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"

namespace fs = std::filesystem;
using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

std::string gzip(const std::string& bytes) {
  const fs::path tmp = fs::temp_directory_path() / ("troupe-seed-" + std::to_string(::getpid()) + ".gz");
  gzFile f = gzopen(tmp.c_str(), "wb9");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  std::ifstream in(tmp, std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(tmp);
  return out;
}

std::string be32(std::uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
  return s;
}
// A gate frame: a u32 little-endian length, then the message.
std::string frame(const std::string& message) {
  unsigned char prefix[wire::kLengthPrefixBytes];
  wire::put_u32(prefix, static_cast<std::uint32_t>(message.size()));
  return std::string(reinterpret_cast<const char*>(prefix), sizeof prefix) + message;
}

// ---------------------------------------------------------------- checkpoint

void checkpoint_seeds() {
  checkpoint::State s;
  s.model = {"mlp", "mlp 4-3-2"};
  s.parameters = {0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
  s.optimizer.name = "adam";
  s.optimizer.spec = "adam beta1=0.9 beta2=0.999";
  s.optimizer.hyper_parameters = {{"beta1", 0.9}, {"beta2", 0.999}};
  s.optimizer.buffers = {{"m", {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}}, {"v", {1, 2, 3, 4, 5, 6}}};
  s.optimizer.scalars = {{"adam_step", 12}};
  s.position.global_step = 12;
  s.position.epoch = 1;
  s.position.cursor = {1, 2, 99};
  s.position.replica_clocks = {12, 11};
  s.position.segment = {10, 40, 2, 4, 3, 48, 1.5, 30, 4};
  s.schedule = {"constant", 12, 1, 0.001};
  s.rng = {7, 3};
  s.update_mode = "ssp:2";
  s.metrics_note = "seed";
  const fs::path tmp = fs::temp_directory_path() / ("troupe-seed-" + std::to_string(::getpid()) + ".troupe");
  checkpoint::write(tmp.string(), s);
  std::ifstream in(tmp, std::ios::binary);
  put("checkpoint", "adam_ssp", std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  fs::remove(tmp);

  checkpoint::State bare;
  bare.model = {"linreg", ""};
  bare.optimizer.name = "sgd";
  bare.update_mode = "sync";
  checkpoint::write(tmp.string(), bare);
  std::ifstream in2(tmp, std::ios::binary);
  put("checkpoint", "sgd_empty", std::string((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>()));
  fs::remove(tmp);
}

// ---------------------------------------------------------------- frames

void frame_header_seeds() {
  wire::FrameFields f;
  f.job_id = 0x7e570b5e55ed1234ull;
  f.kind = 0;
  f.op_seq = 3;
  f.total_bytes = 4000;
  f.step = 1;
  f.chunk = 2;
  f.length = 2048;
  f.crc32c = 0xdeadbeef;
  const auto h = wire::encode_frame_header(f);
  put("frame_header", "allreduce", std::string(h.begin() + 4, h.end()));
  f.kind = 5;
  f.length = 0;
  const auto g = wire::encode_frame_header(f);
  put("frame_header", "send_empty", std::string(g.begin() + 4, g.end()));
  wire::Hello hello;
  hello.purpose = wire::Purpose::ring;
  hello.version = wire::kProtocolVersion;
  hello.job_id = 42;
  hello.rank = 1;
  hello.world = 2;
  const auto ring = wire::encode_hello(hello);
  put("frame_header", "hello", std::string(ring.begin() + 4, ring.end()));
  put("frame_header", "hello_framed", std::string(ring.begin(), ring.end()));
  hello.purpose = wire::Purpose::push_link;
  hello.rank = hello.world = 0;
  const auto push = wire::encode_hello(hello);
  put("frame_header", "hello_push_link", std::string(push.begin() + 4, push.end()));
}

// Relays one connection both ways, recording what `from` sends after its
// Hello (its length prefix and message).
void relay(int from, int to, std::string* record) {
  char buffer[65536];
  std::size_t seen = 0;
  std::size_t hello_bytes = wire::kLengthPrefixBytes;  // until the prefix is in
  unsigned char prefix[wire::kLengthPrefixBytes];
  for (;;) {
    const ssize_t n = ::recv(from, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i, ++seen) {
      if (seen < wire::kLengthPrefixBytes) {
        prefix[seen] = static_cast<unsigned char>(buffer[i]);
        if (seen + 1 == wire::kLengthPrefixBytes) hello_bytes += wire::hello_length(prefix);
      }
      if (record && seen >= hello_bytes) *record += buffer[i];
    }
    if (::send(to, buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
  }
  ::shutdown(to, SHUT_WR);
}

// A 2-rank ring on loopback whose two connections pass through a recording
// relay: rank 0 runs `ops` with the buffers tcp_frames.cpp uses, rank 1 the
// matching ones; returns what rank 1 said to rank 0 on each connection.
struct Recorded {
  std::string frames;  // on the connection rank 0 receives from
  std::string acks;    // on the connection rank 0 sends to
};

kernels::Tensor floats(std::int64_t n) {
  kernels::Tensor t = kernels::Tensor::empty(kernels::Shape{n}, kernels::DType::f32);
  for (std::int64_t i = 0; i < n; ++i) t.f32()[i] = static_cast<float>(i) * 0.5f;
  return t;
}

void run_op(Collective& g, int rank, std::uint8_t op, std::int64_t n) {
  kernels::Tensor a = floats(n);
  const int peer = 1 - rank;
  switch (op % 7) {
    case 0:
      g.allreduce(a, ReduceOp::sum)->wait(Clock::now() + 10s);
      break;
    case 1:
      g.broadcast(a, 1)->wait(Clock::now() + 10s);
      break;
    case 2: {
      kernels::Tensor out = floats(2 * n);
      g.allgather(a, out)->wait(Clock::now() + 10s);
      break;
    }
    case 3: {
      kernels::Tensor in = floats(2 * n);
      g.reduce_scatter(in, a, ReduceOp::sum)->wait(Clock::now() + 10s);
      break;
    }
    case 4:
      g.barrier()->wait(Clock::now() + 10s);
      break;
    // rank 0's recv is rank 1's send, and the other way round
    case 5:
      (rank == 0 ? g.recv(a, peer, op / 7) : g.send(a, peer, op / 7))->wait(Clock::now() + 10s);
      break;
    case 6:
      (rank == 0 ? g.send(a, peer, op / 7) : g.recv(a, peer, op / 7))->wait(Clock::now() + 10s);
      break;
  }
}

Recorded record_ring(const std::vector<std::uint8_t>& ops, std::int64_t n, std::size_t chunk_bytes) {
  int real[2], proxy[2];
  std::uint16_t real_port[2], proxy_port[2];
  for (int r = 0; r < 2; ++r) {
    real[r] = listen_tcp("127.0.0.1:0", &real_port[r]);
    proxy[r] = listen_tcp("127.0.0.1:0", &proxy_port[r]);
  }
  auto address = [](std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); };
  Recorded rec;
  std::vector<std::thread> relays;
  // Each proxy accepts one connection and relays it to the real listener.
  std::vector<std::thread> proxies;
  std::mutex mutex;
  std::vector<int> fds;
  for (int r = 0; r < 2; ++r)
    proxies.emplace_back([&, r] {
      const int in = ::accept(proxy[r], nullptr, nullptr);
      const int out = wire::connect_tcp(address(real_port[r]), Clock::now() + 5s);
      // connect_tcp makes the socket non-blocking; the relay blocks.
      const int flags = ::fcntl(out, F_GETFL);
      ::fcntl(out, F_SETFL, flags & ~O_NONBLOCK);
      {
        std::lock_guard<std::mutex> lock(mutex);
        fds.push_back(in);
        fds.push_back(out);
      }
      // proxy 0 carries rank 1 -> rank 0 (frames); proxy 1 carries rank 0 ->
      // rank 1, where rank 1 answers (hello, acks).
      std::thread a(relay, in, out, r == 0 ? &rec.frames : nullptr);
      std::thread b(relay, out, in, r == 1 ? &rec.acks : nullptr);
      a.join();
      b.join();
    });
  std::vector<std::unique_ptr<Collective>> groups(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      TcpGroupConfig c;
      c.rank = r;
      // Each rank listens on its real port and connects through the proxy.
      c.addresses = {address(real_port[0]), address(real_port[1])};
      c.addresses[static_cast<std::size_t>(1 - r)] = address(proxy_port[1 - r]);
      c.job_id = 0x7e570b5e55ed1234ull;
      c.options.timeout = 5s;
      c.chunk_bytes = chunk_bytes;
      c.listen_fd = real[r];
      groups[static_cast<std::size_t>(r)] = make_tcp_group(c);
      for (std::uint8_t op : ops) run_op(*groups[static_cast<std::size_t>(r)], r, op, n);
    });
  for (auto& t : ranks) t.join();
  groups.clear();
  for (auto& t : proxies) t.join();
  for (int fd : fds) ::close(fd);
  for (int r = 0; r < 2; ++r) ::close(proxy[r]);
  return rec;
}

void tcp_frames_seeds() {
  struct Case {
    const char* name;
    std::vector<std::uint8_t> ops;
    std::uint8_t n, chunk;
  };
  const Case cases[] = {{"allreduce", {0}, 9, 3}, {"broadcast", {1}, 5, 0},
                        {"allgather", {2}, 4, 1}, {"reduce_scatter", {3}, 6, 2},
                        {"barrier", {4}, 0, 0},   {"recv", {5}, 3, 0},
                        {"send", {6}, 3, 0},      {"allreduce_barrier_broadcast", {0, 4, 1}, 7, 1}};
  for (const Case& c : cases) {
    const std::int64_t n = 1 + c.n % 64;
    const std::size_t chunk_bytes = 4 * (1 + std::size_t{c.chunk} % 16);
    const Recorded rec = record_ring(c.ops, n, chunk_bytes);
    std::string input(1, static_cast<char>(c.ops.size() - 1));
    for (std::uint8_t op : c.ops) input += static_cast<char>(op);
    input += static_cast<char>(c.n);
    input += static_cast<char>(c.chunk);
    input += rec.frames.empty() ? rec.acks : rec.frames;
    put("tcp_frames", c.name, input);
  }
}

// ---------------------------------------------------------------- gate

void gate_seeds() {
  // Mode byte (gate_handshake.cpp): bit 0 joiner, bit 1 no secret.
  const Secret secret = Secret::from_text("fuzz secret");
  for (const bool with_secret : {true, false}) {
    const Secret s = with_secret ? secret : Secret();
    Acceptor acceptor(s);
    Joiner joiner(s, "worker/fuzz");
    JoinResponse response = joiner.respond(acceptor.challenge());
    const AuthResult auth = acceptor.verify(response);
    const char mode_bit = with_secret ? 0 : 2;
    // To an acceptor: the joiner's frame.
    response.troupe_version = "0.1.0";
    put("gate_handshake", with_secret ? "acceptor_secret" : "acceptor_open",
        std::string(1, mode_bit) + frame(response.encode()));
    response.troupe_version = "0.0.9";
    put("gate_handshake", with_secret ? "acceptor_old_version" : "acceptor_open_old_version",
        std::string(1, mode_bit | 4) + frame(response.encode()));
    // To a joiner: the gate's challenge, then an admission and a refusal.
    const std::string greeting = frame(acceptor.challenge().encode());
    Verdict admitted;
    admitted.admitted = true;
    admitted.identity = "coordinator";
    admitted.proof = auth.proof;
    put("gate_handshake", with_secret ? "joiner_admitted" : "joiner_open_admitted",
        std::string(1, mode_bit | 1) + greeting + frame(admitted.encode()) + "after");
    Verdict refused;
    refused.identity = "coordinator";
    refused.reason = "the job has started";
    put("gate_handshake", with_secret ? "joiner_refused" : "joiner_open_refused",
        std::string(1, mode_bit | 1) + greeting + frame(refused.encode()));
  }
}

// ---------------------------------------------------------------- IDX, CSV

void idx_seeds() {
  std::string images = std::string("\0\0\x08\x03", 4) + be32(2) + be32(3) + be32(3);
  for (int i = 0; i < 18; ++i) images += static_cast<char>(i * 14);
  put("idx", "images", images);
  put("idx", "images.gz", gzip(images));
  std::string labels = std::string("\0\0\x08\x01", 4) + be32(4) + std::string("\x00\x09\x03\x07", 4);
  put("idx", "labels", labels);
  put("idx", "labels.gz", gzip(labels));
}

// ---------------------------------------------------------------- images

// A palette image takes `pixels` as indices into a 256-entry grey ramp.
std::string png_of(int height, int width, png_uint_32 format, const std::vector<unsigned char>& pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  std::vector<unsigned char> colormap(256 * 3);
  for (std::size_t i = 0; i < colormap.size(); ++i) colormap[i] = static_cast<unsigned char>(i / 3);
  const void* map = nullptr;
  if (format & PNG_FORMAT_FLAG_COLORMAP) {
    image.colormap_entries = 256;
    map = colormap.data();
  }
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, map)) std::abort();
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, map)) std::abort();
  out.resize(size);
  return out;
}

std::string jpeg_of(int height, int width, int channels, bool progressive) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 75, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<unsigned char> row(static_cast<std::size_t>(width * channels));
  while (cinfo.next_scanline < cinfo.image_height) {
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<unsigned char>(i * 29 + cinfo.next_scanline * 7);
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  return out;
}

void image_seeds() {
  std::vector<unsigned char> pixels(4 * 5 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 13);
  put("image", "grey.png", png_of(4, 5, PNG_FORMAT_GRAY, pixels));
  put("image", "rgb.png", png_of(4, 5, PNG_FORMAT_RGB, pixels));
  put("image", "rgba.png", png_of(4, 5, PNG_FORMAT_RGBA, pixels));
  put("image", "palette.png", png_of(4, 5, PNG_FORMAT_RGB_COLORMAP, pixels));
  put("image", "grey.jpg", jpeg_of(8, 8, 1, false));
  put("image", "rgb.jpg", jpeg_of(9, 17, 3, false));
  put("image", "progressive.jpg", jpeg_of(16, 16, 3, true));
}

void csv_seeds() {
  // Option byte (csv.cpp): bit 0 regression, bit 1 label column "y", bit 2
  // three classes, bits 3-4 test fraction, bits 5-7 seed.
  put("csv", "iris",
      std::string(1, '\0') + "sepal_length,sepal_width,species\n5.1,3.5,0\n4.9,3.0,0\n6.2,2.9,1\n5.9,3.0,2\n");
  put("csv", "regression_y", std::string(1, '\x0b') + "y, x1 ,x2\r\n1.5, 2,3e-2\r\n\r\n-0.25,4,5\r\n7,8,9\r\n");
  put("csv", "three_classes.gz", std::string(1, '\x04') + gzip("a,b,c\n1,2,2\n3,4,0\n"));
}

// ---------------------------------------------------------------- text

void text_seeds() {
  put("job_file", "flat",
      "# troupe job\nmodel = \"cnn\"\ndata = \"fashion-mnist\"\nepochs = 2\nbatch = 64\n"
      "lr = 1e-3\nmode = \"sync\"\nswitch = \"500:async,900:ssp:3\"\noptimizer = \"sgd\"\n"
      "momentum = 0.9\nnesterov = true\nseed = \"18446744073709551615\"\n");
  // TOML beyond plain `key = value`: literal and multi-line strings, a line
  // ending backslash, inline and dotted tables, a hexadecimal integer.
  put("job_file", "toml",
      "model = 'mlp'\ndata = \"\"\"\nfashion-\\\n  mnist\"\"\"\ntraining.epochs = 0x2\n"
      "checkpoint_dir = '''C:\\ck\tpt'''\nseed = 9_223_372_036_854_775_807\n"
      "optimizer = { name = \"sgd\", momentum = 0.5, nesterov = false }\n");
  put("job_file", "table",
      "model = \"mlp\"   # a comment\nsteps = 1_000\nschedule = \"cosine:100/0.1\"\n"
      "warmup = 10\n\n[training]\nthreads = 2\n\n[optimizer]\nname = \"adam\"\nbeta1 = 0.8\n"
      "beta2 = 0.99\nepsilon = 1E-7\nweight_decay = 0.0\n");
  put("job_file", "strings",
      "checkpoint_dir = \"runs/\\\"x\\\"\\\\ckpt\\t1\"\ntensorboard = \"tb\"\n"
      "elastic_batch = \"global\"\ncheckpoint_every = 100\ncheckpoint_minutes = 2.5\n"
      "keep = 0\neval_batch = 500\neval_every = 50\nprefetch = 4\nmode = \"ssp:2\"\r\n"
      "schedule = \"piecewise:1=0.01,3=0.001\"\n");

  put("cluster_spec", "tf_config",
      R"({"cluster": {"worker": ["host-a:7000", "host-b:7000"], "chief": ["host-c:7000"],)"
      R"( "ps": ["host-d:7001"]}, "task": {"type": "worker", "index": 1}})");
  put("cluster_spec", "ipv6_string_index",
      R"({"cluster":{"worker":["[::1]:7000","[fe80::1]:7001"]},)"
      R"("task":{"type":"worker","index":"0"}})");
  put("cluster_spec", "ps_task",
      "{\n  \"cluster\": {\"worker\": [\"a:1\"], \"ps\": [\"b:2\", \"c:3\"]},\n"
      "  \"task\": {\"type\": \"ps\", \"index\": 1}\n}\n");

  // Mode byte (control_http.cpp): 0 open server, 1 server with a secret, 2 signed.
  put("control_http", "status", std::string(1, '\0') + "GET /status HTTP/1.1\r\nHost: x\r\n\r\n");
  put("control_http", "mode",
      std::string(1, '\0') + "POST /mode?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nasync");
  put("control_http", "chunked",
      std::string(1, '\0') +
          "POST /stop HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
          "chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n");
  put("control_http", "wrong_method", std::string(1, '\0') + "DELETE /drain HTTP/1.0\r\n\r\n");
  put("control_http", "unsigned",
      std::string(1, '\1') +
          "POST /stop HTTP/1.1\r\nHost: x\r\nAuthorization: "
          "TROUPE-HMAC ts=1,nonce=00,mac=00\r\n\r\n");
  put("control_http", "bearer",
      std::string(1, '\1') +
          "GET /metrics HTTP/1.1\r\nAuthorization: Bearer "
          "fuzz-metrics-token-0123456789abcdef\r\n\r\n");
  put("control_http", "signed_mode", std::string("\2\0", 2) + std::string(8, '\0') + "POST\n/mode\nsync");
  put("control_http", "signed_stale", std::string("\2\1", 2) + std::string(8, '\0') + "GET\n/status\n");
}

// ---------------------------------------------------------------- push_frames
// push_frames.cpp's built form (first byte odd): per frame a flag byte
// (1: shard 3, 2: corrupt the CRC, 4: shard from 4 bytes, 8: floats from 8
// bytes, 16: sequence from 4 bytes, 32: the flag kReadsNext, 64: an unknown
// flag), view, rank, clock (2 bytes), then the payload's bytes; the raw form
// (first byte even) is the stream itself.
void push_frame_seeds() {
  const std::string clock("\0\1", 2);
  const std::string payload(64, '\x3f');
  const std::string shard0 = std::string("\0\0\0", 3) + clock + payload;
  const std::string shard3 = std::string("\1\0\1", 3) + clock + std::string(160, '\x40');
  put("push_frames", "shard0", "\1" + shard0);
  put("push_frames", "two_shards", "\1" + shard0 + shard3);
  put("push_frames", "bad_crc", "\1" + std::string("\2\0\0", 3) + clock + payload);
  put("push_frames", "unknown_shard", "\1" + std::string("\4\0\0\0\7\0", 6) + clock + payload);
  put("push_frames", "huge_claim", "\1" + std::string("\x08\0\0", 3) + clock + std::string("\0\0\1\0\0\0\0\0", 8));
  put("push_frames", "reads_next", "\1" + shard0 + "\x21" + shard3.substr(1));  // shard 3 marked last
  put("push_frames", "unknown_flag", "\1" + std::string("\x40\0\0", 3) + clock + payload);
  put("push_frames", "raw", std::string(1, '\0') + "TPSP" + std::string(40, '\0'));
}

// ---------------------------------------------------------------- model_spec
// The zoo's specs as troupe writes them into checkpoints, and hand-written
// ones with every layer and option.
void model_spec_seeds() {
  using troupe::models::DataShape;
  using troupe::models::zoo_spec;
  const DataShape images{troupe::kernels::Shape{1, 28, 28}, troupe::kernels::DType::f32, 10, 1, 0};
  put("model_spec", "mlp", zoo_spec("mlp", images).text());
  put("model_spec", "cnn", zoo_spec("cnn", images).text());
  put("model_spec", "linreg",
      zoo_spec("linreg", DataShape{troupe::kernels::Shape{1}, troupe::kernels::DType::f32, 0, 1, 0}).text());
  put("model_spec", "textcnn",
      zoo_spec("textcnn", DataShape{troupe::kernels::Shape{300}, troupe::kernels::DType::i32, 5, 1, 1000}).text());
  put("model_spec", "conv2d_options",
      "name pads  # a comment\ninput 2 9 9\nconv2d filters=3 kernel=3 stride=2 padding=same\nrelu\n"
      "maxpool2d pool=2 stride=1\nconv2d filters=2 kernel=2x3 padding=1\nflatten\ndropout rate=0.25\ndense units=4\n");
  put("model_spec", "conv1d_options",
      "name seq\ninput 3 20\nconv1d filters=4 kernel=5 padding=2\nrelu\nmaxpool1d pool=3\nflatten\ndense units=2\n");
}

// ---------------------------------------------------------------- push_answers
// push_answers.cpp: byte 0 the form (1: built, 2: the client polls, 4: two
// pushes); a built answer is a flags byte (1: CRC off, 2: shard, 4:
// sequence, 8: floats, 64: magic from the input; bits 4-5 the status), a
// staleness byte, a refusal's reason (length byte, then the text) or the
// payload's bytes (16 floats for shard 0, 40 for shard 3).
void push_answer_seeds() {
  const std::string part0(16 * 4, '\x3f'), part3(40 * 4, '\x40');
  put("push_answers", "one_taken", std::string("\1\0\3", 3) + part0);
  put("push_answers", "two_taken_polling", std::string("\7\0\0", 3) + part0 + std::string("\0\5", 2) + part3);
  put("push_answers", "refused_then_taken", std::string("\5\x10\0\x05", 4) + "full!" + std::string("\0\1", 2) + part3);
  put("push_answers", "bad_crc", std::string("\1\1\0", 3) + part0);
  put("push_answers", "wrong_sequence", std::string("\5\4\7\0", 4) + part0);
  put("push_answers", "huge_claim", std::string("\1\x08\0", 3) + std::string("\0\0\1\0\0\0\0\0", 8));
  put("push_answers", "raw", std::string(1, '\0') + "TPSA" + std::string(36, '\0'));
}

}  // namespace

// sealed_records: byte 0 helpers (sender bits 0-1, receiver 2-3; bit 4
// the sender's poll, bit 5 the receiver's), bytes
// 1-2 the payload's length, byte 3 record_bytes / 8, byte 4 the number of
// alterations (4 bytes each: kind, u16 position, value), then payload bytes.
void sealed_record_seeds() {
  auto seed = [](std::uint8_t helpers, std::uint16_t bytes, std::uint8_t record, const std::string& changes) {
    std::string s;
    s += static_cast<char>(helpers);
    s += static_cast<char>(bytes & 0xff);
    s += static_cast<char>(bytes >> 8);
    s += static_cast<char>(record);
    s += static_cast<char>(changes.size() / 4);
    return s + changes + "payload bytes, repeated";
  };
  auto change = [](std::uint8_t kind, std::uint16_t at, std::uint8_t value) {
    return std::string{static_cast<char>(kind), static_cast<char>(at & 0xff), static_cast<char>(at >> 8),
                       static_cast<char>(value)};
  };
  put("sealed_records", "one_record", seed(0, 1000, 31, ""));
  put("sealed_records", "ramped", seed(1 | (1 << 2), 3000, 31, ""));
  put("sealed_records", "ramped_to_one_opener", seed(2, 3000, 15, ""));
  put("sealed_records", "flipped_tag", seed(3 | (3 << 2), 3000, 31, change(0, 60, 0x80)));
  put("sealed_records", "flipped_length", seed(1 | (2 << 2), 3000, 31, change(0, 23, 1)));
  put("sealed_records", "truncated", seed(1 | (1 << 2), 3000, 31, change(1, 1500, 0)));
  put("sealed_records", "swapped", seed(2 | (1 << 2), 2000, 7, change(4, 300, 200)));
  put("sealed_records", "inserted", seed(1, 500, 7, change(2, 65535, 7)));
  put("sealed_records", "polling_helpers", seed(2 | (2 << 2) | 16 | 32, 3000, 15, ""));
  put("sealed_records", "polling_flipped", seed(3 | (1 << 2) | 16 | 32, 3000, 31, change(0, 700, 0x10)));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds DIR\n";
    return 2;
  }
  root = argv[1];
  checkpoint_seeds();
  frame_header_seeds();
  tcp_frames_seeds();
  gate_seeds();
  idx_seeds();
  csv_seeds();
  image_seeds();
  text_seeds();
  push_frame_seeds();
  push_answer_seeds();
  model_spec_seeds();
  sealed_record_seeds();
  std::cout << "seeds written under " << root << "\n";
  return 0;
}
