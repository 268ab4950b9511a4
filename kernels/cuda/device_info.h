// What the launch choices need to know about the current CUDA device (plain C++ header). Query once at
// start-up and keep the values: each call is a driver round trip.
#pragma once

namespace tp::cuda {

// Number of CUDA devices visible (0 when there is none or no driver; never throws).
int device_count();

// Streaming multiprocessors of the current device (attention_splits' n_sms). Throws tp::Error on a CUDA error.
int multiprocessor_count();

// Compute capability of the current device as major · 10 + minor (90 for H100/H200). Throws tp::Error.
int compute_capability();

}  // namespace tp::cuda
