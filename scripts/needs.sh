# What troupe needs from Debian 12: sourced (not run) by scripts/setup.sh,
# which installs the packages, and scripts/check-commands.sh, which checks
# that every program the build, the tests, the examples and the main job
# run is there and comes from a package below (or from one that every
# Debian system has). docs/DEPENDENCIES.md says the same for people; change
# the three together.

# The packages scripts/setup.sh installs, each with who needs it.
TROUPE_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                      # C++ Actor Framework 0.17.6
  capnproto libcapnp-dev          # wire frames and checkpoints; `capnp decode` reads a checkpoint in a test
  libboost-dev libboost-system-dev # Asio / Beast (data plane, HTTP control)
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # bench/
  libopenblas-dev                 # fast CPU sgemm
  libdnnl-dev                     # oneDNN (convolution / pooling on CPU)
  libcli11-dev                    # the troupe command line
  zlib1g-dev                      # gzipped IDX files
  libpng-dev                      # images:DIR: PNG decoding (models/data/images.cpp)
  libjpeg62-turbo-dev             # images:DIR: JPEG decoding, libjpeg-turbo's libjpeg API (models/data/images.cpp)
  libssl-dev                      # OpenSSL libcrypto: SHA-256, HMAC, HKDF, random bytes
  nlohmann-json3-dev              # JSON written and read (status, summary, metrics, TF_CONFIG)
  libtomlplusplus-dev             # toml++ 3.3: the job file (job/job_file.cpp)
  dataset-fashion-mnist           # the default training data
  wordnet-base                    # WordNet glosses: the text CNN's labelled corpus
  bible-kjv                       # the King James Bible: the default text of the language model (--data kjv)
  gnuplot-nox                     # examples/mode_switch_experiment, scripts/timeline.py, scripts/tensorboard_plot.py: plots
  prometheus                      # tests/cli/prometheus_scrape.cpp: a real server scrapes GET /metrics
                                  # (about 8 s to install; on a host with systemd it also starts its own
                                  # service on :9090, which the test does not use)
  openmpi-bin                     # tests/cluster/test_launchers.cpp: a real mpirun starts three `troupe node`s
  clang libclang-rt-14-dev        # scripts/fuzz.sh, scripts/ci-sanitizers.sh: libFuzzer and the ASan/UBSan build
  libomp-14-dev                   # clang's OpenMP, which the cpu kernels need in that build (gcc's comes with g++)
  llvm                            # llvm-symbolizer: the sanitizers name functions, which the suppression files match
  clang-format                    # scripts/check-format.sh (in scripts/test.sh): the tree's format, .clang-format
  python3                         # scripts/timeline.py, scripts/tensorboard_plot.py (standard library only),
                                  # tests/chaos/lib.sh's free_port
  iproute2                        # `ip netns`: the multi-node tests in network namespaces (tests/cluster/netns.hpp,
                                  # tests/faults/node_faults.sh); they skip where namespaces cannot be made
  procps                          # ps, pgrep: tests/faults/node_faults.sh finds and reaps its processes
  libonnx-dev                     # models/export/onnx.cpp: ONNX's protobuf types (ModelProto), `troupe export`
  libprotobuf-dev                 # protobuf's headers and CMake's FindProtobuf, which libonnx-dev needs and does
                                  # not depend on: a fresh Debian 12 had libprotobuf32 only, and configure failed
  python3-onnx                    # tests/export/onnx_check.py: onnx.checker on every export; torch_resnet_check.py
  nodejs npm                      # tests/export/ort_compare.js runs onnxruntime-node (npm) under node; setup.sh
                                  # installs that package with npm
)

# Every program that troupe's scripts and tests run, beside the ones that
# come with every Debian system (bash, coreutils, grep, sed, awk, find:
# priority "required"), as "COMMAND PACKAGE". A test may still skip without
# one, naming the package; scripts/test.sh fails first instead.
TROUPE_COMMANDS=(
  "c++ build-essential"          "cmake cmake"            "ninja ninja-build"     "pkg-config pkg-config"
  "capnp capnproto"              "gnuplot gnuplot-nox"    "prometheus prometheus" "mpirun openmpi-bin"
  "clang++ clang"                "python3 python3"        "ip iproute2"           "ps procps"
  "pgrep procps"                 "clang-format clang-format"  "llvm-symbolizer llvm"
  "node nodejs"                  "bible bible-kjv"
)

# Files the builds need that no command names, as "PATH PACKAGE": checked
# the same way.
TROUPE_FILES=(
  "/usr/lib/llvm-14/lib/libomp.so libomp-14-dev"  # -fopenmp under clang (scripts/ci-sanitizers.sh)
)
