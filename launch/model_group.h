// Everything a rank needs to run a model as part of a tensor-parallel group: MPI (when launched by mpirun),
// the TP communicator, this rank's model shard, its KV pool (cache.dtype, sized from cache.memory_mb; the ranks of the
// group agree on the smallest block count any of them can hold) and its Worker. world = dp × tp ranks; replica d = ranks [d·tp, (d+1)·tp).
// Refused with a ConfigError before the costly part: a cache.max_context beyond the model's trained context
// (before the weights load), a cache.memory_mb that does not fit the node's available memory (before the pool
// is allocated; launch/host_memory.h). World rank 0 shows the weights loading on stderr (launch/load_progress.h).
// model.device picks the Backend (rank/backend.h) before anything is loaded: cuda in a build without CUDA, or
// on a host without a GPU, is refused there with a ConfigError naming model.device.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "common/config.h"
#include "coordinator/engine.h"
#include "kvstore/kv_pool.h"
#include "parallel/mpi_communicator.h"
#include "rank/backend.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/worker.h"

namespace tp {

// True when this process was started by mpirun / an MPI launcher.
bool launched_by_mpi();

struct ModelGroup {
  // threads: compute threads per rank (0: cores on this node / ranks on this node).
  // progress_line: where rank 0's weight-loading lines go (e.g. a JSON Logger); empty: stderr, a bar on a terminal.
  ModelGroup(int* argc, char*** argv, const Config& cfg, int threads,
             std::function<void(const std::string&)> progress_line = {});
  ~ModelGroup();

  int world_rank() const { return world ? world->rank() : 0; }
  bool is_leader() const { return worker->is_leader(); }
  // One line about this rank: weights, KV pool, threads.
  std::string report() const;
  // The engine config for this group's pool: the same block count, the per-rank KV footprint in its dtype.
  EngineConfig engine_config(const Config& cfg) const;

  std::unique_ptr<MpiSession> mpi;
  std::unique_ptr<MpiCommunicator> world, tp_comm;
  // The forward's collectives on a GPU backend with tp > 1: NCCL, or tp_comm with host staging when ranks
  // share a GPU (parallel/device_binding.h); null on CPU, where the forward uses tp_comm.
  std::unique_ptr<Communicator> device_comm;
  std::unique_ptr<ModelFile> file;
  std::shared_ptr<Backend> backend;  // outlives the model, whose weights live in it
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<Worker> worker;
  int threads = 1;
  bool keep_quantized = true;  // model.quantized: keep
};

}  // namespace tp
