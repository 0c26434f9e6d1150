#!/usr/bin/env bash
# Installs every Debian 12 package troupe needs, and nothing else.
# Idempotent: packages already present are not touched, and apt is not even
# asked when nothing is missing. Needs root (or sudo) only when something is
# missing. It never downloads anything but Debian packages.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                      # C++ Actor Framework 0.17.6
  capnproto libcapnp-dev          # wire frames and checkpoints
  libboost-dev libboost-system-dev # Asio / Beast (data plane, HTTP control)
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # bench/
  libopenblas-dev                 # fast CPU sgemm
  libdnnl-dev                     # oneDNN (convolution / pooling on CPU)
  libcli11-dev                    # the troupe command line
  zlib1g-dev                      # gzipped IDX files
  libssl-dev                      # OpenSSL libcrypto: SHA-256, HMAC, HKDF, random bytes
  nlohmann-json3-dev              # JSON written and read (status, summary, metrics, TF_CONFIG)
  libtomlplusplus-dev             # toml++ 3.3: the job file (actors/job_file.cpp)
  dataset-fashion-mnist           # the default training data
  wordnet-base                    # WordNet glosses: the text CNN's labelled corpus
  gnuplot-nox                     # examples/mode_switch_experiment: the accuracy-against-time plot
  prometheus                      # tests/cli/prometheus_scrape.cpp: a real server scrapes GET /metrics
                                  # (about 8 s to install; on a host with systemd it also starts its own
                                  # service on :9090, which the test does not use)
  openmpi-bin                     # tests/node/test_launchers.cpp: a real mpirun starts three `troupe node`s
  clang libclang-rt-14-dev        # scripts/fuzz.sh, scripts/ci-sanitizers.sh: libFuzzer and the ASan/UBSan build
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
