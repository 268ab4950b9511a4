// The gap between the largest and the second-largest logit of a row: how close a greedy choice was to a tie
// (tests accept a greedy divergence only where this gap is below their tolerance).
#pragma once
#include <cmath>
#include <vector>

namespace tp::test {

inline float top2_gap(const std::vector<float>& logits) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : logits) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

}  // namespace tp::test
