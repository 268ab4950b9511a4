// Setting up a TP group's GPU collectives over MPI (DESIGN §1): the node-local rank that picks the GPU
// (parallel/device_binding.h), every member's device key, and the NCCL unique id — made by TP rank 0 and
// broadcast over MPI to the group, so every rank calls ncclCommInitRank with the same id (one NCCL
// communicator per TP group). Plain MPI: built and tested without NCCL or a GPU (tests/parallel/mpi_test.cpp).
// make_nccl_communicator (parallel/nccl_communicator.cpp, built only with NCCL) does the NCCL part.
#pragma once
#include <mpi.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/device_binding.h"

namespace tp {

constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclIdBytes = std::array<char, kNcclIdBytes>;

// This process's index among the ranks of `comm` on its node (MPI_Comm_split_type, shared memory), and how
// many there are. Collective over comm.
struct NodePlace {
  int local_rank = 0;
  int local_size = 1;
};
NodePlace node_place(MPI_Comm comm);

// Collective over `group`: TP rank 0 calls make_id (ncclGetUniqueId in production), every rank returns its
// bytes. Throws what make_id throws (on rank 0; the others then fail in the broadcast or time out).
NcclIdBytes exchange_nccl_id(Communicator& group, const std::function<NcclIdBytes()>& make_id);

// Collective over `group`: every member's key (device_key), in TP rank order. A key longer than 255 bytes
// throws InputError before any communication.
std::vector<std::string> gather_device_keys(Communicator& group, const std::string& key);

// Whether this build carries the NCCL communicator.
bool nccl_built();

// The NCCL communicator of `group` (ncclCommInitRank with the id exchange_nccl_id gives), its collectives
// enqueued on the Stream each call passes (the backend's). The calling rank must already be bound to its
// GPU (cudaSetDevice). Throws tp::Error naming the NCCL error, or when this build has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& group);

}  // namespace tp
