// Fuzzes the spec parser (core/spec/spec.h) on JSON. JSON specs go through the YAML
// parser (JSON is YAML's flow style); protobuf's JSON mapping is their meaning. So where
// protobuf's own JSON parser accepts a document, ParseSpec must accept it too and give
// the same message, on documents that are JSON (RFC 8259).
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<v1::JobSpec> spec = ParseSpec(text, "fuzz");
  if (spec.ok()) (void)Validate(*spec);

  // yaml-cpp reads a lone CR (old Mac line ends; CRLF is fine) as text, not a line break,
  // so such a document may fail to parse as YAML (cleanly: checked above).
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\r' && (i + 1 == size || data[i + 1] != '\n')) return 0;
  }
  // Protobuf's JSON parser takes some text that is not JSON (a raw line break inside a
  // string, which YAML folds to a space): compare only on documents that are JSON.
  if (!nlohmann::json::accept(text)) return 0;
  v1::JobSpec direct;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  if (!google::protobuf::util::JsonStringToMessage(text, &direct, opts).ok()) return 0;
  if (!spec.ok() || !google::protobuf::util::MessageDifferencer::Equals(*spec, direct)) {
    std::fprintf(stderr, "protobuf's JSON parser reads\n%s\nParseSpec: %s\n",
                 direct.DebugString().c_str(),
                 spec.ok() ? spec->DebugString().c_str() : spec.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
