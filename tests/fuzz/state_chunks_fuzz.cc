// Fuzzes the reassembly of a TrainState from a FetchState stream (StateChunkAssembler,
// services/common/rpc/wire.h), as the coordinator receives it from a worker. The input is
// the stream: each chunk a varint length and that many bytes, parsed as a StateChunk.
// A state that assembles must be exactly the data sent, laid out as its header says.
#include <google/protobuf/io/coded_stream.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "services/common/rpc/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  lockstep::StateChunkAssembler assembler;
  lockstep::v1::StateChunk first;
  std::string sent;
  bool first_seen = false;
  uint32_t length;
  while (in.ReadVarint32(&length)) {
    std::string bytes;
    if (!in.ReadString(&bytes, static_cast<int>(length))) break;
    lockstep::v1::StateChunk chunk;
    if (!chunk.ParseFromString(bytes)) break;
    if (!assembler.Add(chunk).ok()) return 0;
    if (!first_seen) first = chunk;
    first_seen = true;
    sent += chunk.data();
  }
  absl::StatusOr<lockstep::TrainState> state = std::move(assembler).Finish();
  if (!state.ok()) return 0;
  const lockstep::StateHeader h = lockstep::FromProto(first.header());
  if (state->step != h.step || state->params.size() != h.param_count ||
      state->slots.size() != h.slot_count || lockstep::StateBytes(*state) != sent) {
    std::abort();
  }
  return 0;
}
