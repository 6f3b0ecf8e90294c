// The sampler of engine/sampler.py for a few rows on CPU, one call per step.
//
// Why: the torch pipeline is ~60 small ops (a sort, softmaxes, cumsums, the counter hash) on a
// (rows, 626) tensor, each paying a dispatch that is large next to its work: a noticeable share of an
// int8 decode step that is otherwise bound by its weight reads. Here each row is a few loops over its logits.
//
// Semantics are the torch pipeline's, in its order: divide by the temperature, repetition penalty
// (penalty**count, multiplied into negative logits, divided out of the rest), top-p (drop the low
// tail whose ascending cumulative probability is at most 1 - top_p, keeping at least 3), top-k
// (keep the k >= 3 largest, ties with the k-th kept), ban EOS while asked, softmax, and an
// inverse-CDF draw in token order with the counter-based uniform. Greedy rows take the argmax
// after the penalty and the EOS ban. Only the top-k are ever sorted (a partial sort), since top-k
// keeps nothing outside them. exp and pow are libm's, not torch's vectorized ones, so
// probabilities agree with the torch path to float32 rounding (tests hold both to the golden
// outputs), and a draw can differ only where its uniform falls within that rounding of a boundary.

#include "sample_rows.h"

#include <ATen/ops/empty.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace {

constexpr int64_t kMinTokensToKeep = 3;
constexpr uint64_t kMask32 = 0xFFFFFFFFull;

uint64_t fmix32(uint64_t h) {
  h ^= h >> 16;
  h = (h * 0x85EBCA6Bull) & kMask32;
  h ^= h >> 13;
  h = (h * 0xC2B2AE35ull) & kMask32;
  return h ^ (h >> 16);
}

// engine/sampler.py's counter_uniform for one (seed, step)
double counter_uniform(int64_t seed, int64_t step) {
  const uint64_t s = static_cast<uint64_t>(seed);
  const uint64_t key = fmix32((s & kMask32) ^ fmix32(((s >> 32) & kMask32) ^ 0x9E3779B9ull));
  const uint64_t h1 = fmix32(key ^ fmix32(static_cast<uint64_t>(step) & kMask32));
  const uint64_t h2 = fmix32(h1 ^ 0x68E31DA4ull);
  return static_cast<double>((h1 << 21) | (h2 >> 11)) / 9007199254740992.0;  // 53 bits / 2^53
}

struct RowInputs {
  float temperature, penalty, top_p;
  int64_t top_k, eos_id;
  bool ban_eos, is_greedy;
  const int64_t* history;
  int64_t history_len;
};

// logits <- logits with the repetition penalty applied (ids equal to V in the history are padding)
void apply_penalty(float* x, int64_t V, const RowInputs& in) {
  if (in.penalty == 1.f) return;
  std::vector<int64_t> ids(in.history, in.history + in.history_len);
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    const int64_t id = ids[i];
    if (id >= 0 && id < V) {
      const float alpha = std::pow(in.penalty, static_cast<float>(j - i));
      x[id] = x[id] < 0.f ? x[id] * alpha : x[id] / alpha;
    }
    i = j;
  }
}

int64_t greedy_row(const float* logits, int64_t V, const RowInputs& in) {
  std::vector<float> x(logits, logits + V);
  apply_penalty(x.data(), V, in);
  if (in.ban_eos) x[in.eos_id] = -std::numeric_limits<float>::infinity();
  return std::max_element(x.begin(), x.end()) - x.begin();  // the first maximum, as torch.argmax
}

// The ids top-p and top-k keep, ascending; `x` holds the tempered, penalized logits.
std::vector<int64_t> kept_ids(const std::vector<float>& x, int64_t V, const RowInputs& in) {
  const float max_x = *std::max_element(x.begin(), x.end());
  std::vector<float> p(V);
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i) total += (p[i] = std::exp(x[i] - max_x));
  for (int64_t i = 0; i < V; ++i) p[i] = static_cast<float>(p[i] / total);
  const int64_t k = std::clamp(in.top_k, kMinTokensToKeep, V);
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  // top-p: the token of descending rank r goes when the probability of it and everything below it is
  // at most 1 - top_p; that mass shrinks with r, so the survivors are the ranks below the first such r
  double mass_of_all = 0.0;
  for (int64_t i = 0; i < V; ++i) mass_of_all += p[i];
  const float threshold = 1.f - in.top_p;
  int64_t survivors = k;  // top-k keeps no more than k (plus ties) anyway
  double above = 0.0;
  for (int64_t r = 0; r < k; ++r) {
    if (r >= kMinTokensToKeep && static_cast<float>(mass_of_all - above) <= threshold) {
      survivors = r;
      break;
    }
    above += p[order[r]];
  }
  std::vector<int64_t> kept(order.begin(), order.begin() + survivors);
  if (survivors == k) {  // top-k's threshold is the k-th value: its ties outside the first k stay too
    const float kth = x[order[k - 1]];
    for (int64_t i = 0; i < V; ++i)
      if (x[i] == kth && std::find(kept.begin(), kept.end(), i) == kept.end()) kept.push_back(i);
  }
  if (in.ban_eos) kept.erase(std::remove(kept.begin(), kept.end(), in.eos_id), kept.end());
  std::sort(kept.begin(), kept.end());
  return kept;
}

// One sampled id; probs (V floats, zero outside the kept ids) where not null.
int64_t sample_row(const float* logits, int64_t V, const RowInputs& in, double uniform, float* probs) {
  std::vector<float> x(V);
  for (int64_t i = 0; i < V; ++i) x[i] = logits[i] / in.temperature;
  apply_penalty(x.data(), V, in);
  const std::vector<int64_t> kept = kept_ids(x, V, in);
  float max_kept = -std::numeric_limits<float>::infinity();
  for (int64_t id : kept) max_kept = std::max(max_kept, x[id]);
  std::vector<float> weights(kept.size());
  double sum = 0.0;  // in double: a sequential float sum of hundreds of terms drifts from torch's vectorized one
  for (size_t j = 0; j < kept.size(); ++j) sum += (weights[j] = std::exp(x[kept[j]] - max_kept));
  for (float& w : weights) w = static_cast<float>(w / sum);
  if (probs != nullptr) {
    std::fill(probs, probs + V, 0.f);
    for (size_t j = 0; j < kept.size(); ++j) probs[kept[j]] = weights[j];
  }
  // inverse CDF in token order, as torch.searchsorted(cdf, u * cdf[-1], right=True), clamped to V - 1
  double cdf_total = 0.0;
  for (float w : weights) cdf_total += w;
  const double target = uniform * cdf_total;
  double cdf = 0.0;
  for (size_t j = 0; j < kept.size(); ++j) {
    cdf += weights[j];
    if (cdf > target) return kept[j];
  }
  return V - 1;
}

void check(const at::Tensor& t, at::ScalarType type, int64_t rows, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == type && t.size(0) == rows,
              "sample_rows: ", what, " must be a contiguous CPU ", c10::toString(type), " tensor with ", rows, " rows");
}

}  // namespace

at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& penalty,
                          const at::Tensor& top_p, const at::Tensor& top_k, const at::Tensor& history,
                          const at::Tensor& ban_eos, const at::Tensor& is_greedy, const at::Tensor& seeds,
                          const at::Tensor& steps, int64_t eos_id, const at::Tensor& probs_out) {
  TORCH_CHECK(logits.dim() == 2, "sample_rows: logits must be (rows, vocab)");
  const int64_t R = logits.size(0), V = logits.size(1);
  check(logits, at::kFloat, R, "logits");
  for (const auto* t : {&temperature, &penalty, &top_p}) check(*t, at::kFloat, R, "temperature/penalty/top_p");
  for (const auto* t : {&top_k, &seeds, &steps, &history}) check(*t, at::kLong, R, "top_k/seeds/steps/history");
  for (const auto* t : {&ban_eos, &is_greedy}) check(*t, at::kBool, R, "ban_eos/is_greedy");
  TORCH_CHECK(eos_id >= 0 && eos_id < V, "sample_rows: eos id ", eos_id, " outside the vocabulary of ", V);
  const bool has_probs = probs_out.numel() > 0;
  if (has_probs) check(probs_out, at::kFloat, R, "probs_out");
  auto ids = at::empty({R}, at::kLong);
  const float* lp = logits.data_ptr<float>();
  const int64_t W = history.dim() == 2 ? history.size(1) : 0;
  at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const RowInputs in{temperature.data_ptr<float>()[r], penalty.data_ptr<float>()[r], top_p.data_ptr<float>()[r],
                         top_k.data_ptr<int64_t>()[r],     eos_id,
                         ban_eos.data_ptr<bool>()[r],      is_greedy.data_ptr<bool>()[r],
                         history.data_ptr<int64_t>() + r * W, W};
      const float* row = lp + r * V;
      float* probs = has_probs ? probs_out.data_ptr<float>() + r * V : nullptr;
      if (probs != nullptr && in.is_greedy) std::fill(probs, probs + V, 0.f);
      ids.data_ptr<int64_t>()[r] =
          in.is_greedy ? greedy_row(row, V, in)
                       : sample_row(row, V, in, counter_uniform(seeds.data_ptr<int64_t>()[r], steps.data_ptr<int64_t>()[r]),
                                    probs);
    }
  });
  return ids;
}
