// `ridge roofline <op>`: the roofline bound of one operation on one or more chips, and
// `ridge roofline plot`: the chart. Parsing and printing only; the models are in ridge::roofline,
// the shapes, measured points and plotting in ridge::report.
#include <fmt/format.h>

#include <memory>
#include <sstream>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "report/report.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "roofline/json.hpp"

namespace ridge::cli {
void setup_roofline_model(CLI::App* parent);   // cmd_roofline_model.cpp
void setup_roofline_ddp(CLI::App* parent);     // cmd_roofline_ddp.cpp
void setup_roofline_decode(CLI::App* parent);  // cmd_roofline_decode.cpp
}  // namespace ridge::cli

namespace {

namespace rr = ridge::roofline;
namespace rp = ridge::report;
using ridge::DType;

struct Common {
  std::string hw = "h100";
  std::string level, link = "intra_node";
  bool json = false;
};

std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<rr::Chip> chips_of(const std::string& hw) {
  std::vector<rr::Chip> chips;
  for (const auto& name : split(hw))
    chips.push_back(
        ridge::cli::with_flags(ridge::cli::chip_flags("--hw"), [&] { return rr::load_chip(name); }));
  ridge::check(!chips.empty(),
               "--hw: no chip named (accepted: a chip id, 'this', a JSON file, or a comma list)");
  return chips;
}

void add_common(CLI::App* c, Common& o) {
  c->add_option("--hw", o.hw, "chip id(s), comma-separated: h100, tpu-v5e, ..., 'this', or a chip JSON file")
      ->capture_default_str();
  c->add_option("--level", o.level,
                "memory level to bound against (hbm, dram, l3, l2, l1); default outermost");
  c->add_option("--link", o.link, "link for chip-to-chip bytes: intra_node or inter_node")
      ->capture_default_str();
  c->add_flag("--json", o.json, "print one JSON document");
}

int64_t count(const std::string& text, const char* what) {
  return ridge::numbers::parse_integer(text, what, ridge::numbers::kCount);
}

// A dtype given as `flag`: its error names the flag (ridge::parse_dtype names its argument, dtype).
DType dtype_flag(const std::string& text, const char* flag) {
  return ridge::cli::with_flags({{"dtype", flag}}, [&] { return ridge::parse_dtype(text); });
}

// Prints a cost's bound on each chip: a readable account, or one JSON document.
void report(const rr::Cost& cost, const Common& o) {
  // Checked even when the op moves nothing over a link, so a typo is never silently ignored.
  ridge::check(o.link == "intra_node" || o.link == "inter_node" || o.link == "intra" || o.link == "inter",
               "--link: '{}' is not a link (accepted: intra_node, inter_node)", o.link);
  rr::BoundOptions opt{o.level, o.link};
  const auto chips = chips_of(o.hw);
  std::vector<rr::Bound> bounds;
  for (const auto& c : chips)
    bounds.push_back(ridge::cli::with_flags({{"level", "--level"}, {"link", "--link"}},
                                            [&] { return rr::bound(cost, c, opt); }));
  if (o.json) {
    nlohmann::json j = to_json(cost);
    j["bounds"] = nlohmann::json::array();
    for (const auto& b : bounds) j["bounds"].push_back(to_json(b));
    ridge::cli::print_json(j);
    return;
  }
  for (size_t i = 0; i < chips.size(); ++i)
    fmt::print("{}{}", i ? "\n" : "", rr::describe(cost, bounds[i], chips[i]));
}

struct MatmulFlags {
  std::string dtype = "bf16", x, w, out, compute;
  rr::MatmulDtypes get() const {
    rr::MatmulDtypes d;
    const DType base = dtype_flag(dtype, "--dtype");
    d.x = x.empty() ? base : dtype_flag(x, "--x-dtype");
    d.w = w.empty() ? base : dtype_flag(w, "--w-dtype");
    d.out = out.empty() ? d.x : dtype_flag(out, "--out-dtype");
    d.compute = compute;
    if (!compute.empty()) {
      static const char* keys[] = {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"};
      bool ok = false;
      for (const char* k : keys) ok = ok || compute == k;
      ridge::check(
          ok,
          "--compute: '{}' is not a compute dtype (accepted: fp64, fp32, tf32, bf16, fp16, fp8, int8, fp4)",
          compute);
    }
    return d;
  }
  void add(CLI::App* c) {
    c->add_option("--dtype", dtype, "dtype of every operand (fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8)")
        ->capture_default_str();
    c->add_option("--x-dtype", x, "activations' dtype (default --dtype)");
    c->add_option("--w-dtype", w, "weights' dtype (default --dtype), e.g. int8 or fp8_e4m3 weights");
    c->add_option("--out-dtype", out, "output dtype (default the activations')");
    c->add_option("--compute", compute,
                  "peak to run at (default the wider input; tf32 for TF32 tensor cores)");
  }
};

// The cost models' arguments as the ops' flags give them (ridge::roofline names its arguments in
// errors). `first` comes before these, for an op whose flags feed differently named arguments.
ridge::cli::FlagNames cost_flags(ridge::cli::FlagNames first = {}) {
  const ridge::cli::FlagNames common = {{"b", "--b"},
                                        {"d", "--d"},
                                        {"f", "--f"},
                                        {"m", "--m"},
                                        {"n", "--n"},
                                        {"k", "--k"},
                                        {"rows", "--rows"},
                                        {"cols", "--cols"},
                                        {"s.batch", "--batch"},
                                        {"s.heads", "--heads"},
                                        {"s.seq_q", "--seq"},
                                        {"s.seq_kv", "--seq-kv"},
                                        {"s.head_dim", "--head-dim"},
                                        {"inputs", "--inputs"},
                                        {"flops_per_element", "--flops-per-element"},
                                        {"chips", "--chips"},
                                        {"bytes", "--bytes"},
                                        {"m_per_group", "--m-per-group"},
                                        {"max_m", "--m-per-group"},
                                        {"valid_m", "--valid"},
                                        {"D", "--d"},
                                        {"level", "--level"},
                                        {"in", "--in-dtype"},
                                        {"link", "--link"}};
  first.insert(first.end(), common.begin(), common.end());
  return first;
}

template <typename Opts, typename Run>
void sub(CLI::App* parent, const char* name, const char* help, std::shared_ptr<Opts> o,
         std::function<void(CLI::App*, Opts&)> add, Run run, ridge::cli::FlagNames flags = cost_flags()) {
  auto* c = parent->add_subcommand(name, help);
  add(c, *o);
  // A tensor too large for the cost model ("shape") comes from the op's sizes together: its flags.
  std::string sizes;
  for (const CLI::Option* opt : c->get_options()) {
    const std::string n = opt->get_name();
    if (n == "--help" || n.find("dtype") != std::string::npos || n == "--compute" || n == "--impl" ||
        n == "--layout" || n == "--valid" || n == "--causal" || n == "--backward" || n == "--chips")
      continue;
    sizes += (sizes.empty() ? "" : "/") + n;
  }
  flags.push_back({"shape", sizes});
  add_common(c, o->common);
  c->callback([o, run, flags] { report(ridge::cli::with_flags(flags, [&] { return run(*o); }), o->common); });
}

struct MatmulOpts {
  Common common;
  MatmulFlags dt;
  std::string b = "4096", d = "8192", f = "8192", batch = "1", chips = "2";
};
struct VecOpts {
  Common common;
  std::string n = "1048576", dtype = "bf16", rows = "4096", cols = "4096";
  int inputs = 2;
  double fpe = 1;
};
struct AttnOpts {
  Common common;
  std::string batch = "1", heads = "16", seq = "4096", seq_kv, head_dim = "64", dtype = "bf16",
              impl = "flash";
  bool causal = false, backward = false;
};
struct GemmOpts {
  Common common;
  std::string m = "4096", n = "7168", k = "7168", in = "fp8_e4m3", out = "bf16", layout = "contiguous",
              groups = "4", m_per_group = "1024", valid;
};
struct CollOpts {
  Common common;
  std::string bytes = "1GiB", chips = "8", dtype = "bf16";
};

void setup_ops(CLI::App* r) {
  auto mm_add = [](CLI::App* c, MatmulOpts& o) {
    c->add_option("--b", o.b, "tokens B (rows of X[B,D])")->capture_default_str();
    c->add_option("--d", o.d, "D (contraction)")->capture_default_str();
    c->add_option("--f", o.f, "F (columns of W[D,F])")->capture_default_str();
    o.dt.add(c);
  };
  sub<MatmulOpts>(r, "matmul", "X[B,D] @ W[D,F] -> Y[B,F], a dtype per operand",
                  std::make_shared<MatmulOpts>(), mm_add, [](const MatmulOpts& o) {
                    return rr::matmul(count(o.b, "--b"), count(o.d, "--d"), count(o.f, "--f"), o.dt.get());
                  });
  sub<MatmulOpts>(r, "per-example", "X[B,D] @ W[B,D,F]: a weight matrix per example (batched matmul)",
                  std::make_shared<MatmulOpts>(), mm_add, [](const MatmulOpts& o) {
                    return rr::matmul_per_example(count(o.b, "--b"), count(o.d, "--d"), count(o.f, "--f"),
                                                  o.dt.get());
                  });
  sub<MatmulOpts>(
      r, "batched-matmul", "--batch independent [B,D] @ [D,F] matmuls", std::make_shared<MatmulOpts>(),
      [mm_add](CLI::App* c, MatmulOpts& o) {
        mm_add(c, o);
        c->add_option("--batch", o.batch, "number of matmuls")->capture_default_str();
      },
      [](const MatmulOpts& o) {
        return rr::batched_matmul(count(o.batch, "--batch"), count(o.b, "--b"), count(o.d, "--d"),
                                  count(o.f, "--f"), o.dt.get());
      },
      cost_flags({{"count", "--batch"}, {"m", "--b"}, {"k", "--d"}, {"n", "--f"}}));
  sub<MatmulOpts>(
      r, "split-matmul", "matmul with D split over --chips; partial sums all-reduced over a link",
      std::make_shared<MatmulOpts>(),
      [mm_add](CLI::App* c, MatmulOpts& o) {
        mm_add(c, o);
        c->add_option("--chips", o.chips, "chips sharing D")->capture_default_str();
      },
      [](const MatmulOpts& o) {
        return rr::matmul_split_d(count(o.b, "--b"), count(o.d, "--d"), count(o.f, "--f"),
                                  count(o.chips, "--chips"), o.dt.get());
      });
  sub<VecOpts>(
      r, "dot", "x . y of two vectors", std::make_shared<VecOpts>(),
      [](CLI::App* c, VecOpts& o) {
        c->add_option("--n", o.n, "vector length")->capture_default_str();
        c->add_option("--dtype", o.dtype, "dtype")->capture_default_str();
      },
      [](const VecOpts& o) { return rr::dot(count(o.n, "--n"), dtype_flag(o.dtype, "--dtype")); });
  sub<VecOpts>(
      r, "elementwise", "an elementwise op over --n elements of --inputs tensors",
      std::make_shared<VecOpts>(),
      [](CLI::App* c, VecOpts& o) {
        c->add_option("--n", o.n, "elements")->capture_default_str();
        c->add_option("--dtype", o.dtype, "dtype")->capture_default_str();
        // The ranges roofline::elementwise takes.
        c->add_option("--inputs", o.inputs, "input tensors read")
            ->capture_default_str()
            ->transform(ridge::cli::integer_in(1, 16));
        c->add_option("--flops-per-element", o.fpe, "FLOPs per output element")
            ->capture_default_str()
            ->transform(ridge::cli::number_in(0, 1e6));
      },
      [](const VecOpts& o) {
        return rr::elementwise(count(o.n, "--n"), dtype_flag(o.dtype, "--dtype"), o.inputs, o.fpe);
      });
  sub<VecOpts>(
      r, "softmax", "row softmax of a [rows, cols] matrix", std::make_shared<VecOpts>(),
      [](CLI::App* c, VecOpts& o) {
        c->add_option("--rows", o.rows, "rows")->capture_default_str();
        c->add_option("--cols", o.cols, "columns (softmax length)")->capture_default_str();
        c->add_option("--dtype", o.dtype, "dtype")->capture_default_str();
      },
      [](const VecOpts& o) {
        return rr::softmax(count(o.rows, "--rows"), count(o.cols, "--cols"), dtype_flag(o.dtype, "--dtype"));
      });
  sub<AttnOpts>(
      r, "attention", "attention: --impl naive (scores through memory) or flash (scores on chip)",
      std::make_shared<AttnOpts>(),
      [](CLI::App* c, AttnOpts& o) {
        c->add_option("--impl", o.impl, "naive or flash")->capture_default_str();
        c->add_option("--batch", o.batch, "batch")->capture_default_str();
        c->add_option("--heads", o.heads, "heads")->capture_default_str();
        c->add_option("--seq", o.seq, "sequence length (queries)")->capture_default_str();
        c->add_option("--seq-kv", o.seq_kv, "keys/values length (default --seq)");
        c->add_option("--head-dim", o.head_dim, "head dimension")->capture_default_str();
        c->add_option("--dtype", o.dtype, "dtype")->capture_default_str();
        c->add_flag("--causal", o.causal, "causal mask");
        c->add_flag("--backward", o.backward, "forward + backward");
      },
      [](const AttnOpts& o) {
        rr::AttentionShape s;
        s.batch = count(o.batch, "--batch");
        s.heads = count(o.heads, "--heads");
        s.seq_q = count(o.seq, "--seq");
        s.seq_kv = o.seq_kv.empty() ? s.seq_q : count(o.seq_kv, "--seq-kv");
        s.head_dim = count(o.head_dim, "--head-dim");
        s.dtype = dtype_flag(o.dtype, "--dtype");
        s.causal = o.causal;
        s.backward = o.backward;
        if (o.impl == "naive") return rr::attention_naive(s);
        if (o.impl == "flash") return rr::attention_flash(s);
        ridge::fail("--impl: '{}' is not an attention implementation (accepted: naive, flash)", o.impl);
      });
  sub<GemmOpts>(
      r, "fp8-gemm", "D[m,n] = A[m,k] B[n,k]^T in fp8 with fp32 block scales (1x128 for A, 128x128 for B)",
      std::make_shared<GemmOpts>(),
      [](CLI::App* c, GemmOpts& o) {
        c->add_option("--m", o.m, "M")->capture_default_str();
        c->add_option("--n", o.n, "N")->capture_default_str();
        c->add_option("--k", o.k, "K")->capture_default_str();
        c->add_option("--in-dtype", o.in, "input dtype (fp8_e4m3, fp8_e5m2, int8)")->capture_default_str();
        c->add_option("--out-dtype", o.out, "output dtype")->capture_default_str();
      },
      [](const GemmOpts& o) {
        return rr::fp8_gemm(count(o.m, "--m"), count(o.n, "--n"), count(o.k, "--k"),
                            dtype_flag(o.in, "--in-dtype"), dtype_flag(o.out, "--out-dtype"));
      });
  sub<GemmOpts>(
      r, "grouped-gemm", "M-grouped GEMM for MoE: --layout contiguous or masked (only valid rows count)",
      std::make_shared<GemmOpts>(),
      [](CLI::App* c, GemmOpts& o) {
        c->add_option("--layout", o.layout, "contiguous or masked")->capture_default_str();
        c->add_option("--groups", o.groups, "groups (experts)")->capture_default_str();
        c->add_option("--m-per-group", o.m_per_group, "rows per group (masked: the padded maximum)")
            ->capture_default_str();
        c->add_option("--valid", o.valid, "masked: valid rows per group, comma-separated (default all)");
        c->add_option("--n", o.n, "N")->capture_default_str();
        c->add_option("--k", o.k, "K")->capture_default_str();
        c->add_option("--in-dtype", o.in, "input dtype (fp8 inputs carry block scales)")
            ->capture_default_str();
        c->add_option("--out-dtype", o.out, "output dtype")->capture_default_str();
      },
      [](const GemmOpts& o) {
        const auto G = count(o.groups, "--groups");
        ridge::check(G <= 4096, "--groups: {} is too many (at most 4096)", G);
        const auto m = count(o.m_per_group, "--m-per-group");
        std::vector<int64_t> rows(static_cast<size_t>(G), m);
        const auto in = dtype_flag(o.in, "--in-dtype"), out = dtype_flag(o.out, "--out-dtype");
        if (o.layout == "contiguous")
          return rr::grouped_gemm_contiguous(rows, count(o.n, "--n"), count(o.k, "--k"), in, out);
        if (o.layout != "masked")
          ridge::fail("--layout: '{}' is not a layout (accepted: contiguous, masked)", o.layout);
        if (!o.valid.empty()) {
          rows.clear();
          for (const auto& v : split(o.valid))
            rows.push_back(ridge::numbers::parse_integer(v, "--valid", {0, int64_t{1} << 40}));
          ridge::check(static_cast<int64_t>(rows.size()) == G, "--valid: {} counts for {} groups",
                       rows.size(), G);
        }
        return rr::grouped_gemm_masked(m, rows, count(o.n, "--n"), count(o.k, "--k"), in, out);
      });
  auto coll_add = [](CLI::App* c, CollOpts& o) {
    c->add_option("--bytes", o.bytes, "buffer size S (e.g. 1GiB, 512MB)")->capture_default_str();
    c->add_option("--chips", o.chips, "chips in the ring")->capture_default_str();
    c->add_option("--dtype", o.dtype, "element dtype (for the reduction's FLOPs)")->capture_default_str();
  };
  auto coll = [](const char* which) {
    return [which](const CollOpts& o) {
      const auto S = ridge::numbers::parse_bytes(o.bytes, "--bytes");
      const auto t = dtype_flag(o.dtype, "--dtype");
      const std::string w = which;
      const auto n = count(o.chips, "--chips");  // checked for send too, though a send involves two chips
      if (w == "send") return rr::send(S, t);
      if (w == "allreduce") return rr::all_reduce(S, n, t);
      if (w == "allgather") return rr::all_gather(S, n, t);
      return rr::reduce_scatter(S, n, t);
    };
  };
  sub<CollOpts>(r, "allreduce", "ring all-reduce: 2(n-1)/n S / link bandwidth", std::make_shared<CollOpts>(),
                coll_add, coll("allreduce"));
  sub<CollOpts>(r, "allgather", "ring all-gather: (n-1)/n S / link bandwidth", std::make_shared<CollOpts>(),
                coll_add, coll("allgather"));
  sub<CollOpts>(r, "reducescatter", "ring reduce-scatter: (n-1)/n S / link bandwidth",
                std::make_shared<CollOpts>(), coll_add, coll("reducescatter"));
  sub<CollOpts>(r, "send", "send S bytes (a partial sum) to one neighbour", std::make_shared<CollOpts>(),
                coll_add, coll("send"));
}

struct CriticalOpts {
  Common common;
  MatmulFlags dt;
  std::string d = "8192", f = "8192", chips = "2";
};
void critical(const CriticalOpts& o);

void setup_critical(CLI::App* r) {
  auto o = std::make_shared<CriticalOpts>();
  auto* c =
      r->add_subcommand("critical-batch",
                        "smallest token batch at which X[B,D] @ W[D,F] is compute-bound (vs memory), and the "
                        "smallest D at which a D-split matmul is compute-bound (vs a link)");
  c->add_option("--d", o->d, "D")->capture_default_str();
  c->add_option("--f", o->f, "F")->capture_default_str();
  c->add_option("--chips", o->chips, "chips sharing D in the split example")->capture_default_str();
  o->dt.add(c);
  add_common(c, o->common);
  c->callback([o] { ridge::cli::with_flags(cost_flags(), [&] { critical(*o); }); });
}

// Library errors about the cost models' arguments reach the user as cost_flags() names them.
void critical(const CriticalOpts& o) {
  const auto dt = o.dt.get();
  const auto d = count(o.d, "--d"), f = count(o.f, "--f"), n = count(o.chips, "--chips");
  nlohmann::json all = nlohmann::json::array();
  std::string text;
  for (const auto& chip : chips_of(o.common.hw)) {
    const auto cb = rr::critical_batch(chip, d, f, dt, o.common.level);
    nlohmann::json j{{"batch", rr::to_json(cb)}};
    text +=
        fmt::format("{} ({}), {} compute at {}, {} {}\n", chip.id, chip.name, cb.compute,
                    ridge::units::format_flops(cb.peak), cb.level, ridge::units::format_rate(cb.bandwidth));
    text += fmt::format("  vs memory: B > {:.1f} when B << D, F (peak/bw x {} weight bytes / 2)\n",
                        cb.asymptotic, ridge::dtype_size(dt.w));
    text +=
        cb.exact
            ? fmt::format("             exact for D={} F={}: compute-bound from B = {}\n", d, f, *cb.exact)
            : fmt::format("             exact for D={} F={}: never compute-bound (D F <= ratio (D + F))\n", d,
                          f);
    const bool has_link =
        o.common.link == "inter_node" ? chip.inter_node.has_value() : chip.intra_node.has_value();
    if (has_link) {
      const auto cs = rr::critical_split_d(chip, n, dt, o.common.link);
      j["split"] = rr::to_json(cs);
      text += fmt::format(
          "  vs link:   D split over {} chips ({} {} per direction): compute-bound iff D >= {:.1f},\n"
          "             i.e. D/{} > {:.1f}; smallest D = {} (B cancels out)\n",
          n, cs.link, ridge::units::format_rate(cs.link_bandwidth), cs.threshold, n,
          cs.threshold / static_cast<double>(n), cs.exact);
    } else {
      j["split"] = nullptr;
      text += fmt::format("  vs link:   {} has no {} link in its file\n", chip.id, o.common.link);
    }
    all.push_back(j);
  }
  if (o.common.json)
    ridge::cli::print_json(all.size() == 1 ? all[0] : all);
  else
    fmt::print("{}", text);
}

struct PlotOpts {
  std::string hw = "h100,this", out = "roofline", results, title;
  bool no_shapes = false, json = false;
};

void plot(const PlotOpts& o) {
  auto inputs = split(o.hw);  // the plot must not write over a chip file or the results it reads
  inputs.push_back(o.results);
  rp::check_plot_outputs(o.out, inputs);
  rp::check_plot_names(o.out);
  std::vector<rr::Chip> chips;
  std::vector<std::string> skipped;
  for (const auto& name : split(o.hw)) {
    if (name == "this" && !rr::has_probe_result()) {
      skipped.push_back("this (no probe result; run 'ridge probe')");
      continue;
    }
    chips.push_back(rr::load_chip(name));
  }
  ridge::check(!chips.empty(), "--hw: no chip to plot ({})", skipped.empty() ? "none named" : skipped[0]);
  const auto ops = o.no_shapes ? std::vector<rp::NamedCost>{} : rp::standard_ops();
  const auto measured = o.results.empty() ? std::vector<rp::MeasuredPoint>{} : rp::read_measured(o.results);
  std::string title = o.title;
  if (title.empty()) {
    for (const auto& ch : chips) title += (title.empty() ? "" : " vs ") + ch.name;
    title = "roofline: " + title;
  }
  const auto files = rp::render_plot(rp::plot_spec(chips, ops, measured, title), o.out);
  if (o.json) {
    ridge::cli::print_json({{"png", files[0]},
                            {"svg", files[1]},
                            {"spec", files[2]},
                            {"skipped", skipped},
                            {"points", ops.size() * chips.size() + measured.size()}});
    return;
  }
  for (const auto& s : skipped) fmt::print("skipped {}\n", s);
  fmt::print("wrote {} and {} ({} chips, {} predicted and {} measured points; input {})\n", files[0],
             files[1], chips.size(), ops.size() * chips.size(), measured.size(), files[2]);
}

void setup_plot(CLI::App* r) {
  using Opts = PlotOpts;
  auto o = std::make_shared<Opts>();
  auto* c =
      r->add_subcommand("plot",
                        "log-log roofline chart (PNG + SVG): roofs of the chips, the standard shapes as "
                        "predicted points, measured points from --results");
  c->add_option("--hw", o->hw, "chips, comma-separated ('this' is skipped with a note when no probe has run)")
      ->capture_default_str();
  c->add_option("--out", o->out, "output path without extension (writes .png, .svg and the .json input)")
      ->capture_default_str();
  c->add_option("--results", o->results, "JSON-lines benchmark rows to place as measured points");
  c->add_option("--title", o->title, "chart title");
  c->add_flag("--no-shapes", o->no_shapes, "omit the standard shapes' predicted points");
  c->add_flag("--json", o->json, "print one JSON document naming the files written");
  c->callback([o] {
    // Library errors name their arguments; these are the flags that fed them.
    const ridge::cli::FlagNames flags = {
        {"out", "--out"}, {"path", "--results"}, {"name_or_path", "--hw"}, {"chip file", "--hw"}};
    ridge::cli::with_flags(flags, [&] { plot(*o); });
  });
}

void setup(CLI::App& root) {
  auto* r = root.add_subcommand("roofline",
                                "roofline bounds of an operation on a chip: FLOPs, bytes, intensity, "
                                "T_math, T_comm, which roof binds");
  r->require_subcommand(1);
  setup_ops(r);
  setup_critical(r);
  setup_plot(r);
  ridge::cli::setup_roofline_model(r);
  ridge::cli::setup_roofline_ddp(r);
  ridge::cli::setup_roofline_decode(r);
}

}  // namespace

RIDGE_COMMAND(roofline, setup);
