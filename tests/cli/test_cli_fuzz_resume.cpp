// A fuzz test of `ridge train --resume`: one small checkpoint, then many mutations of it (its metadata
// JSON: keys deleted, values of other types or out of range, another precision or model config; its
// safetensors header: lengths, offsets, dtypes, shapes, names; truncation and garbage bytes), each
// resumed. Every run must end with exit 0 (a harmless mutation) or exit 2 with exactly one line on
// stderr that names a flag, never exit 1 ("internal error"), a signal or a timeout, and the mutated file
// must be byte-identical afterwards. Seeded and bounded: the seed is printed; RIDGE_FUZZ_SEED=N replays
// a run, RIDGE_FUZZ_RUNS=N sets the count (RIDGE_TEST_SMALL=1: fewer), RIDGE_FUZZ_BINARY=PATH fuzzes another
// ridge binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../model/checkpoint_edit.hpp"
#include "spawn.hpp"
#include "ridge/build_paths.h"  // RIDGE_BINARY (generated)

namespace {

namespace fs = std::filesystem;
using ridge::test::ojson;

using ridge::test::env_or;
using ridge::test::Outcome;
using ridge::test::run_ridge;
using ridge::test::slurp;
using ridge::test::spit;

class Mutator {
 public:
  Mutator(uint64_t seed, std::string good) : rng_(seed), good_(std::move(good)) {
    const auto parts = ridge::test::split_safetensors(good_);
    header_ = parts.header;
    data_ = parts.data;
    for (auto it = header_.begin(); it != header_.end(); ++it)
      if (it.key() != "__metadata__") names_.push_back(it.key());
  }

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  const T& one(const std::vector<T>& v) {
    return v[pick(v.size())];
  }

  // A JSON value of any type, mostly hostile.
  ojson value() {
    switch (pick(14)) {
      case 0:
        return -1;
      case 1:
        return 0;
      case 2:
        return 1;
      case 3:
        return std::numeric_limits<int64_t>::max();
      case 4:
        return std::numeric_limits<uint64_t>::max();
      case 5:
        return (uint64_t{1} << 53) + 1;
      case 6:
        return 1.5;
      case 7:
        return -1e300;
      case 8:
        return "a";
      case 9:
        return nullptr;
      case 10:
        return true;
      case 11:
        return ojson::array({1, 2, 3, 4});
      case 12:
        return ojson::object({{"x", 1}});
      default:
        return std::string(pick(3) == 0 ? 5000 : 3, static_cast<char>('0' + pick(10)));
    }
  }

  // One mutated file and what was done to it.
  std::string next(std::string* what) {
    ojson h = header_;
    auto& md = h["__metadata__"];
    const std::vector<std::string> state_keys = {
        "step", "rng", "loss_scale", "loss_scale_streak", "skipped_steps", "precision"};
    const std::vector<std::string> config_keys = {"vocab_size", "context_length", "d_model",   "num_layers",
                                                  "num_heads",  "d_ff",           "rope_theta"};
    auto edit_json = [&](const std::string& which, const std::vector<std::string>& keys) {
      ojson j = ojson::parse(md[which].get<std::string>());
      const std::string key = one(keys);
      switch (pick(5)) {
        case 0:
          j.erase(key);
          *what = which + ": delete " + key;
          break;
        case 1:
          j["unknown_" + key] = value();
          *what = which + ": add unknown_" + key;
          break;
        case 2:
          if (which == "state" && chance(0.5)) {
            j["precision"] = one<std::string>({"fp32", "bf16", "fp16", "f32", "FP32", "", "fp8"});
            *what = "state: precision " + j["precision"].dump();
          } else if (which == "state") {
            j["loss_scale"] = one<double>({1.0, 65536.0, 1.0 / 65536, 1e-30, 1e30, 2e30, 0.0, -2.0});
            *what = "state: loss_scale " + j["loss_scale"].dump();
          } else {
            j[key] = one<int64_t>({1, 2, 3, 4, 6, 8, 16, 31, 32, 48, 64, 255, 256, 257, 10000});
            *what = "config: " + key + " " + j[key].dump();
          }
          break;
        default:
          j[key] = value();
          *what = which + ": " + key + " = " + j[key].dump().substr(0, 40);
      }
      md[which] = j.dump();
    };
    auto tensor = [&]() -> ojson& { return h[one(names_)]; };
    switch (pick(16)) {
      case 0:
      case 1:
      case 2:
        edit_json("state", state_keys);
        break;
      case 3:
      case 4:
        edit_json("config", config_keys);
        break;
      case 5: {
        const std::string key = one<std::string>({"format", "config", "state"});
        if (chance(0.5)) {
          md.erase(key);
          *what = "metadata: delete " + key;
        } else {
          md[key] = chance(0.5) ? ojson(one<std::string>({"", "{", "[]", "ridge-checkpoint-2", "null", "{}"}))
                                : value();
          *what = "metadata: " + key + " = " + md[key].dump().substr(0, 40);
        }
        break;
      }
      case 6: {
        auto& t = tensor();
        t["dtype"] = chance(0.8) ? ojson(one<std::string>({"F64", "F32", "BF16", "F16", "F8_E4M3", "F8_E5M2",
                                                           "I8", "I32", "U8", "I64", "BOOL", "", "f32"}))
                                 : value();
        *what = "tensor dtype " + t["dtype"].dump().substr(0, 40);
        break;
      }
      case 7: {
        auto& t = tensor();
        auto shape = t["shape"];
        switch (pick(5)) {
          case 0:
            if (shape.size() == 2) std::swap(shape[0], shape[1]);
            break;
          case 1:
            if (!shape.empty()) shape[pick(shape.size())] = shape[0].get<int64_t>() + 1;
            break;
          case 2:
            shape.push_back(1);
            break;
          case 3:
            shape = ojson::array();
            break;
          default:
            if (!shape.empty()) shape[pick(shape.size())] = value();
        }
        t["shape"] = shape;
        *what = "tensor shape " + shape.dump().substr(0, 40);
        break;
      }
      case 8: {
        auto& t = tensor();
        auto off = t["data_offsets"];
        switch (pick(4)) {
          case 0: {
            const int64_t d = one<int64_t>({-4, 4, 8, -8});
            off[0] = off[0].get<int64_t>() + d;
            off[1] = off[1].get<int64_t>() + d;
            break;
          }
          case 1:
            std::swap(off[0], off[1]);
            break;
          case 2:
            off[pick(2)] = value();
            break;
          default:
            off = h[one(names_)]["data_offsets"];  // another tensor's bytes
        }
        t["data_offsets"] = off;
        *what = "tensor data_offsets " + off.dump().substr(0, 40);
        break;
      }
      case 9: {
        const std::string name = one(names_);
        if (chance(0.5)) {
          h.erase(name);
          *what = "delete tensor " + name;
        } else {
          ojson t = h[name];
          h.erase(name);
          h[name + ".renamed"] = t;
          *what = "rename tensor " + name;
        }
        break;
      }
      case 10: {
        const std::string bytes = ridge::test::join_safetensors(h, data_);
        const size_t at = pick(bytes.size());
        *what = "truncate at " + std::to_string(at);
        return bytes.substr(0, at);
      }
      case 11: {
        std::string bytes = ridge::test::join_safetensors(h, data_);
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        n = one<uint64_t>({0, 1, n - 1, n + 1, n + 8, n * 2, bytes.size(), uint64_t{1} << 63, ~uint64_t{0}});
        std::memcpy(bytes.data(), &n, 8);
        *what = "header length " + std::to_string(n);
        return bytes;
      }
      case 12: {
        std::string bytes = ridge::test::join_safetensors(h, data_);
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        const int flips = 1 + static_cast<int>(pick(4));
        for (int i = 0; i < flips; ++i) bytes[8 + pick(n)] = static_cast<char>(pick(256));
        *what = std::to_string(flips) + " garbage bytes in the header";
        return bytes;
      }
      case 13: {
        std::string bytes = ridge::test::join_safetensors(h, data_);
        const size_t start = bytes.size() - data_.size();
        const int flips = 1 + static_cast<int>(pick(8));
        for (int i = 0; i < flips; ++i) bytes[start + pick(data_.size())] = static_cast<char>(pick(256));
        *what = std::to_string(flips) + " garbage bytes in the data";
        return bytes;
      }
      case 14: {
        std::string bytes = ridge::test::join_safetensors(h, data_);
        std::string junk(1 + pick(64), '\0');
        for (char& c : junk) c = static_cast<char>(pick(256));
        *what = std::to_string(junk.size()) + " garbage bytes appended";
        return bytes + junk;
      }
      default: {
        // Two metadata edits at once.
        std::string w1, w2;
        edit_json("state", state_keys);
        w1 = *what;
        edit_json("config", config_keys);
        w2 = *what;
        *what = w1 + "; " + w2;
      }
    }
    return ridge::test::join_safetensors(h, data_);
  }

 private:
  std::mt19937_64 rng_;
  std::string good_;
  ojson header_;
  std::string data_;
  std::vector<std::string> names_;
};

TEST(CliFuzzResume, MutatedCheckpointsKeepTheContract) {
  const uint64_t seed = std::stoull(env_or("RIDGE_FUZZ_SEED", "20260520"));
  const bool small = env_or("RIDGE_TEST_SMALL", "") == "1";
  const int runs = std::stoi(env_or("RIDGE_FUZZ_RUNS", small ? "60" : "200"));
  const double budget_s = small ? 30 : 60;  // a bound on the test's time, never a pass criterion
  std::cout << "fuzz seed " << seed << " (replay: RIDGE_FUZZ_SEED=" << seed << "), " << runs << " runs\n";
  RecordProperty("seed", std::to_string(seed));

  const fs::path dir = fs::temp_directory_path() / ("ridge_fuzz_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir / "home");
  std::string text(2000, 'a');
  for (size_t i = 0; i < text.size(); i += 5) text[i] = 'b';
  spit(dir / "t.txt", text);
  const std::vector<std::string> model = {"train",
                                          "--d-model",
                                          "32",
                                          "--layers",
                                          "1",
                                          "--heads",
                                          "2",
                                          "--d-ff",
                                          "48",
                                          "--threads",
                                          "1",
                                          "--context",
                                          "16",
                                          "--batch",
                                          "2",
                                          "--text",
                                          (dir / "t.txt").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = model;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Outcome made =
      run_ridge(with({"--steps", "2", "--checkpoint", (dir / "good.safetensors").string()}), dir, 60);
  ASSERT_EQ(made.code, 0) << made.err;
  const std::string good = slurp(dir / "good.safetensors");

  Mutator mut(seed, good);
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0, failures = 0;
  std::map<int, int> codes;
  const fs::path bad = dir / "mutated.safetensors";
  for (int i = 0; i < runs; ++i) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) break;
    std::string what;
    const std::string bytes = mut.next(&what);
    spit(bad, bytes);
    const Outcome o = run_ridge(with({"--steps", "3", "--resume", bad.string()}), dir, 20);
    ++done;
    ++codes[o.timed_out ? -2 : o.signal ? -100 - o.signal : o.code];
    std::string why;
    if (o.timed_out)
      why = "timed out after 20 s";
    else if (o.signal)
      why = "killed by signal " + std::to_string(o.signal);
    else if (o.code != 0 && o.code != 2)
      why = "exit " + std::to_string(o.code);
    else if (o.code == 2) {
      const auto nl = o.err.find('\n');
      if (o.err.empty() || nl != o.err.size() - 1)
        why = "exit 2 without exactly one line on stderr";
      else if (o.err.rfind("ridge: --", 0) != 0)
        why = "exit 2 with a line that does not start 'ridge: --FLAG'";
    }
    if (slurp(bad) != bytes) why += (why.empty() ? "" : "; ") + std::string("the mutated checkpoint changed");
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << why << " (seed " << seed << ", run " << i << ", " << what << "):\n  stderr: " << o.err;
      if (failures >= 10) break;
    }
  }
  std::cout << done << " runs:";
  for (const auto& [c, n] : codes) std::cout << " exit " << c << " x" << n;
  std::cout << "\n";
  EXPECT_GE(done, std::min(runs, 20)) << "the time budget ended the test before it ran enough cases";
  EXPECT_GT(codes[2], 0) << "no mutation was refused: the mutator is not reaching the checks";
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
