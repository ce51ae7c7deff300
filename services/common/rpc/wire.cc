// The Worker API's protos <-> the plain commands and results (core/commands.h): the one place that
// knows both, used by the worker's service and the coordinator's gRPC client. Contract: wire.h.
#include "services/common/rpc/wire.h"

#include <algorithm>
#include <limits>

namespace lockstep {

v1::PrepareHeader ToProto(const JobAssignment& job) {
  v1::PrepareHeader h;
  h.set_job_id(job.job_id);
  *h.mutable_spec() = job.replica.spec;
  h.set_rank(job.replica.rank);
  h.set_world_size(job.replica.world_size);
  h.set_rendezvous_prefix(job.rendezvous_prefix);
  h.set_collective_timeout_ms(absl::ToInt64Milliseconds(job.replica.collective_timeout));
  h.set_logical_replicas(job.replica.logical_replicas);
  h.set_logical_first(job.replica.logical_first);
  h.set_logical_count(job.replica.logical_count);
  h.set_keep_state(job.keep_state);
  return h;
}

JobAssignment FromProto(const v1::PrepareHeader& h) {
  JobAssignment job;
  job.job_id = h.job_id();
  job.replica.spec = h.spec();
  job.replica.rank = h.rank();
  job.replica.world_size = h.world_size();
  job.replica.collective_timeout = absl::Milliseconds(h.collective_timeout_ms());
  job.rendezvous_prefix = h.rendezvous_prefix();
  job.replica.logical_replicas = h.logical_replicas();
  job.replica.logical_first = h.logical_first();
  job.replica.logical_count = h.logical_count();
  job.keep_state = h.keep_state();
  return job;
}

v1::StateHeader ToProto(const StateHeader& s) {
  v1::StateHeader h;
  h.set_step(s.step), h.set_param_count(s.param_count), h.set_slot_count(s.slot_count);
  h.set_stats_count(s.stats_count);
  return h;
}

StateHeader FromProto(const v1::StateHeader& h) {
  return {h.step(), h.param_count(), h.slot_count(), h.stats_count()};
}

v1::PrepareResponse ToProto(const PrepareResult& result) {
  v1::PrepareResponse r;
  r.set_train_examples(result.train_examples), r.set_test_examples(result.test_examples);
  r.set_param_checksum(result.param_checksum);
  r.set_step(result.step);
  for (const CompletedStep& c : result.ahead) {
    v1::CompletedStep& out = *r.add_ahead();
    out.set_step(c.step);
    out.mutable_losses()->Add(c.losses.begin(), c.losses.end());
    out.mutable_accuracies()->Add(c.accuracies.begin(), c.accuracies.end());
  }
  return r;
}

PrepareResult FromProto(const v1::PrepareResponse& r) {
  PrepareResult out{r.train_examples(), r.test_examples(), r.param_checksum(), r.step(), {}};
  for (const v1::CompletedStep& c : r.ahead()) {
    out.ahead.push_back({c.step(),
                         {c.losses().begin(), c.losses().end()},
                         {c.accuracies().begin(), c.accuracies().end()}});
  }
  return out;
}

v1::StepRequest ToProto(const std::string& job_id, const StepCommand& command) {
  v1::StepRequest r;
  r.set_job_id(job_id);
  r.set_step(command.step);
  r.set_key0(command.key.k0);
  r.set_key1(command.key.k1);
  r.mutable_indices()->Add(command.indices.begin(), command.indices.end());
  r.set_want_checksum(command.want_checksum);
  r.set_collective_timeout_ms(
      static_cast<uint32_t>(std::min<int64_t>(absl::ToInt64Milliseconds(command.collective_timeout),
                                              std::numeric_limits<uint32_t>::max())));
  r.set_want_grad_digest(command.want_grad_digest);
  if (command.audit) {
    v1::AuditShard* a = r.mutable_audit();
    a->mutable_indices()->Add(command.audit_indices.begin(), command.audit_indices.end());
    a->set_key0(command.audit_key.k0);
    a->set_key1(command.audit_key.k1);
  }
  for (const rng::Key& k : command.keys) {
    r.add_keys(k.k0);
    r.add_keys(k.k1);
  }
  r.set_data_key0(command.data_key.k0);
  r.set_data_key1(command.data_key.k1);
  return r;
}

StepCommand FromProto(const v1::StepRequest& r, std::vector<rng::Key>* keys) {
  StepCommand c;
  c.step = r.step();
  c.key = {r.key0(), r.key1()};
  c.indices = {r.indices().data(), static_cast<size_t>(r.indices_size())};
  c.want_checksum = r.want_checksum();
  c.collective_timeout = absl::Milliseconds(r.collective_timeout_ms());
  c.want_grad_digest = r.want_grad_digest();
  if (r.has_audit()) {
    c.audit = true;
    c.audit_indices = {r.audit().indices().data(), static_cast<size_t>(r.audit().indices_size())};
    c.audit_key = {r.audit().key0(), r.audit().key1()};
  }
  keys->clear();
  for (int i = 0; i + 1 < r.keys_size(); i += 2) keys->push_back({r.keys(i), r.keys(i + 1)});
  c.keys = *keys;
  c.data_key = {r.data_key0(), r.data_key1()};
  return c;
}

v1::StepResponse ToProto(const StepResult& result) {
  v1::StepResponse r;
  r.set_step(result.step);
  r.set_loss(result.loss);
  r.set_accuracy(result.accuracy);
  r.set_param_checksum(result.param_checksum);
  r.set_compute_ms(result.compute_ms);
  r.set_allreduce_ms(result.allreduce_ms);
  r.set_update_ms(result.update_ms);
  r.set_step_ms(result.step_ms);
  r.set_grad_digest(result.grad_digest);
  r.set_audited(result.audited);
  r.set_audit_digest(result.audit_digest);
  r.set_audit_loss(result.audit_loss);
  r.set_stats_digest(result.stats_digest);
  r.set_audit_stats_digest(result.audit_stats_digest);
  r.mutable_replica_losses()->Add(result.replica_losses.begin(), result.replica_losses.end());
  r.mutable_replica_accuracies()->Add(result.replica_accuracies.begin(),
                                      result.replica_accuracies.end());
  return r;
}

StepResult FromProto(const v1::StepResponse& r) {
  StepResult out{r.step(),        r.loss(),         r.accuracy(),     r.param_checksum(),
                 r.compute_ms(),  r.allreduce_ms(), r.update_ms(),    r.step_ms(),
                 r.grad_digest(), r.audited(),      r.audit_digest(), r.audit_loss()};
  out.stats_digest = r.stats_digest();
  out.audit_stats_digest = r.audit_stats_digest();
  out.replica_losses.assign(r.replica_losses().begin(), r.replica_losses().end());
  out.replica_accuracies.assign(r.replica_accuracies().begin(), r.replica_accuracies().end());
  return out;
}

v1::EvaluateResponse ToProto(const EvalSums& sums) {
  v1::EvaluateResponse r;
  r.set_loss_sum(sums.loss_sum), r.set_correct(sums.correct), r.set_count(sums.count);
  r.set_predictions(sums.predictions);
  return r;
}

EvalSums FromProto(const v1::EvaluateResponse& r) {
  return {r.loss_sum(), r.correct(), r.count(), r.predictions()};
}

bool WriteStateChunks(const StateHeader& header, std::string_view bytes,
                      const std::function<bool(const v1::StateChunk&)>& write) {
  const size_t n = StateChunkCount(bytes);
  for (size_t i = 0; i < n; ++i) {
    if (!write(StateChunkAt(header, bytes, i))) return false;
  }
  return true;
}

size_t StateChunkCount(std::string_view bytes) {
  return std::max<size_t>(1, (bytes.size() + kStateChunkBytes - 1) / kStateChunkBytes);
}

v1::StateChunk StateChunkAt(const StateHeader& header, std::string_view bytes, size_t i) {
  v1::StateChunk chunk;
  if (i == 0) *chunk.mutable_header() = ToProto(header);
  chunk.set_data(
      std::string(bytes.substr(std::min(bytes.size(), i * kStateChunkBytes), kStateChunkBytes)));
  return chunk;
}

absl::Status StateChunkAssembler::Add(const v1::StateChunk& chunk, uint64_t max_bytes) {
  if (!state_.has_value()) {
    if (!chunk.has_header()) return absl::DataLossError("the first state chunk carries no header");
    absl::StatusOr<StateAssembler> a = StateAssembler::Create(FromProto(chunk.header()), max_bytes);
    if (!a.ok()) return absl::DataLossError(a.status().message());
    state_.emplace(std::move(a).value());
  } else if (chunk.has_header()) {
    return absl::DataLossError("only the first state chunk carries a header");
  }
  return state_->Append(chunk.data());
}

absl::StatusOr<TrainState> StateChunkAssembler::Finish() && {
  if (!state_.has_value()) return absl::DataLossError("no state arrived");
  return std::move(*state_).Finish();
}

}  // namespace lockstep
