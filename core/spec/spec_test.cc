#include "core/spec/spec.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::StatusIs;

constexpr char kGood[] = R"(
model: {kind: mlp, hidden: [32, 16], dropout_rate: 0.1}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 64
steps: 10
workers: 2
)";

absl::StatusOr<v1::JobSpec> ParseAndValidate(const std::string& text) {
  auto spec = ParseSpec(text, "spec.yaml");
  if (!spec.ok()) return spec.status();
  return Validate(*spec);
}

TEST(Spec, ParsesYamlAndFillsDefaults) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate(kGood));
  EXPECT_EQ(s.model().hidden_size(), 2);
  EXPECT_EQ(s.rng_impl(), "partitionable");
  EXPECT_EQ(s.device(), "cpu");
  EXPECT_EQ(s.dataset().path(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(s.dropout_seed(), 0);
  EXPECT_EQ(s.eval().batch_size(), 1000u);
}

TEST(Spec, AllReduceBucketsDefaultTo64KiBAndAreBounded) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate(kGood));
  EXPECT_EQ(s.allreduce().bucket_kib(), kDefaultBucketKib);
  EXPECT_EQ(AllReduceBucketBytes(s), 64u << 10);
  EXPECT_EQ(AllReduceBucketBytes(v1::JobSpec()), 64u << 10);  // unset, not validated
  ASSERT_OK_AND_ASSIGN(v1::JobSpec off,
                       ParseAndValidate(std::string(kGood) + "allreduce: {bucket_kib: 0}\n"));
  EXPECT_EQ(AllReduceBucketBytes(off), 0u);
  EXPECT_THAT(ParseAndValidate(std::string(kGood) + "allreduce: {bucket_kib: 1048577}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allreduce.bucket_kib")));
}

TEST(Spec, ParsesJson) {
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec s,
      ParseAndValidate(
          R"({"model": {"kind": "cnn"}, "optimizer": {"kind": "sgd", "learningRate": 0.1},
          "globalBatchSize": 128, "epochs": 1, "rngImpl": "legacy"})"));
  EXPECT_EQ(s.global_batch_size(), 128u);
  EXPECT_EQ(s.rng_impl(), "legacy");
}

// Every spec under examples/ (a new one included without listing it here).
TEST(Spec, ExamplesAreValid) {
  int seen = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(testing::SourcePath("examples"))) {
    if (e.path().extension() != ".yaml") continue;
    ++seen;
    auto s = LoadSpecFile(e.path().string());
    ASSERT_TRUE(s.ok()) << s.status();
    const auto valid = Validate(*s);
    EXPECT_TRUE(valid.ok()) << e.path() << ": " << valid.status();
  }
  EXPECT_GE(seen, 9);
}

TEST(Spec, AnNpzDatasetIsValidatedNamingItsFields) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate(std::string(kGood) + R"(
dataset:
  format: npz
  train_path: /data/train.npz
  test_path: /data/test.npz
  normalize: {mean: [0.5], std: [0.25]}
)"));
  EXPECT_EQ(s.dataset().image_key(), "image");
  EXPECT_EQ(s.dataset().label_key(), "label");
  EXPECT_EQ(s.dataset().path(), "");
  EXPECT_THAT(ParseAndValidate(std::string(kGood) + "dataset: {format: npz, train_path: /a.npz}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.test_path")));
  EXPECT_THAT(
      ParseAndValidate(std::string(kGood) +
                       "dataset: {format: npz, train_path: /a, test_path: /b, normalize: {mean: "
                       "[0.5, 0.5, 0.5], std: [1, 1, 1]}}\n"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.normalize.mean: 3 values for the model's 1 input channels")));
  EXPECT_THAT(ParseAndValidate(std::string(kGood) + "dataset: {format: npz, trainPath: /a}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.test_path")));
  EXPECT_THAT(
      ParseAndValidate(std::string(kGood) + "dataset: {format: npz, train: /a}\n"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.train: unknown field")));
  // On a cluster: both files inside the data roots, as written.
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/data"));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec parsed,
                       ParseSpec(std::string(kGood) + "dataset: {format: npz, train_path: "
                                                      "/data/a.npz, test_path: /data/../etc/b}\n",
                                 "s"));
  EXPECT_THAT(
      Validate(parsed, {.data_roots = roots}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.test_path: \"/data/../etc/b\" is outside the data roots")));
}

TEST(Spec, UnknownFieldIsNamedWithItsPath) {
  EXPECT_THAT(ParseAndValidate(std::string(kGood) + "optimiser: {}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("spec.yaml"), HasSubstr("optimiser"))));
  EXPECT_THAT(ParseAndValidate("model: {kind: mlp, widths: [3]}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.widths")));
}

TEST(Spec, WrongTypeNamesTheField) {
  EXPECT_THAT(ParseAndValidate("global_batch_size: lots\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global_batch_size")));
  EXPECT_THAT(ParseAndValidate("model: {kind: mlp, hidden: 12x}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden")));
}

// At 0692893 `epochs: five` answered with protobuf's "Invalid value for TYPE_UINT32".
TEST(Spec, AScalarOfTheWrongKindSaysWhatTheFieldWants) {
  const auto message = [](const std::string& yaml) {
    return std::string(ParseSpec(yaml, "spec.yaml").status().message());
  };
  EXPECT_EQ(message("epochs: five\n"),
            "spec.yaml: epochs: expected a whole number >= 0, not \"five\"");
  EXPECT_EQ(message("epochs: -2\n"), "spec.yaml: epochs: expected a whole number >= 0, not -2");
  EXPECT_EQ(message("epochs: 2.5\n"), "spec.yaml: epochs: expected a whole number >= 0, not 2.5");
  EXPECT_EQ(message("optimizer: {kind: sgd, learning_rate: fast}\n"),
            "spec.yaml: optimizer.learning_rate: expected a number, not \"fast\"");
  EXPECT_EQ(message("model: {kind: mlp, hidden: [32, many]}\n"),
            "spec.yaml: model.hidden[1]: expected a whole number >= 0, not \"many\"");
  EXPECT_EQ(message("model: {kind: mlp, hidden: 12x}\n"),
            "spec.yaml: model.hidden: expected a whole number >= 0, not \"12x\"");
  EXPECT_EQ(message("model: {kind: mlp, hidden: {a: 1}}\n"),
            "spec.yaml: model.hidden: expected a whole number >= 0, not a mapping");
  // One element alone is the list of it, as protobuf's JSON parser reads it.
  absl::StatusOr<v1::JobSpec> one = ParseSpec("model: {kind: mlp, hidden: 64}\n", "spec.yaml");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(one->model().hidden(), ElementsAre(64));
  EXPECT_EQ(message("{\"epochs\": [1]}"),
            "spec.yaml: epochs: expected a whole number >= 0, not a list");
  // Numbers as strings are protobuf JSON's (int64 is written "5"): they pass.
  EXPECT_TRUE(ParseSpec("{\"epochs\": \"5\", \"steps\": \"100\"}", "spec.json").ok());
}

TEST(Spec, BadYamlNamesTheSource) {
  EXPECT_THAT(ParseSpec("model: [unclosed\n", "bad.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.yaml")));
  EXPECT_THAT(LoadSpecFile("/nonexistent/spec.yaml"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/spec.yaml")));
}

TEST(Spec, TextThatIsNotUtf8IsInvalidArgument) {
  EXPECT_THAT(
      ParseSpec("name: mlp\xff\n", "latin1.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("latin1.yaml: not valid UTF-8")));
  EXPECT_THAT(ParseSpec("{\"name\": \"mlp\xc3\"}", "cut.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8")));
}

// 511 bytes whose aliases expand to 10^9 values once took minutes and gigabytes.
TEST(Spec, AliasesExpandingPast65536ValuesAreRefused) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    absl::StrAppend(&yaml, "a", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&yaml, j ? ", " : "", "*a", i - 1);
    absl::StrAppend(&yaml, "]\n");
  }
  EXPECT_THAT(ParseSpec(yaml, "laughs.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aliases expanding")));
}

TEST(Spec, JsonIsReadAsJson) {
  // Valid JSON that YAML's flow style does not take: a key's colon on the next line.
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec spec,
      ParseSpec("{\"name\": \"n\", \"eval\"\n :{\"every_steps\": 5}}", "spec.json"));
  EXPECT_EQ(spec.eval().every_steps(), 5);
  EXPECT_THAT(ParseSpec(std::string(100, '[') + std::string(100, ']'), "deep.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested deeper than")));
  EXPECT_THAT(ParseSpec("{\"name\": 3, \"nmae\": \"x\"}", "typo.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nmae")));
}

TEST(Spec, AnAliasInsideItsOwnAnchorIsRefused) {
  // A cycle: converting it recursed until the stack overflowed (spec_yaml_fuzz).
  EXPECT_THAT(ParseSpec("a0: &a0 [x, *a0]\nname: n\n", "cycle.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested deeper than")));
}

struct BadCase {
  const char* edit;
  const char* field;
};

class SpecInvalid : public ::testing::TestWithParam<BadCase> {};

TEST_P(SpecInvalid, NamesTheField) {
  auto spec = ParseSpec(kGood, "spec.yaml");
  ASSERT_OK(spec);
  auto edit = ParseSpec(GetParam().edit, "edit");
  ASSERT_OK(edit);
  spec->MergeFrom(*edit);
  if (edit->model().hidden_size() > 0)
    *spec->mutable_model()->mutable_hidden() = edit->model().hidden();
  EXPECT_THAT(Validate(*spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().field)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SpecInvalid,
    ::testing::Values(BadCase{"model: {kind: resnet}", "model.kind"},
                      BadCase{"model: {hidden: [0]}", "model.hidden[0]"},
                      BadCase{"model: {dropout_rate: 1.0}", "model.dropout_rate"},
                      BadCase{"optimizer: {kind: lamb}", "optimizer.kind"},
                      BadCase{"optimizer: {learning_rate: -0.1}", "optimizer.learning_rate"},
                      BadCase{"optimizer: {b1: 1.5}", "optimizer.b1"},
                      BadCase{"global_batch_size: 63", "global_batch_size"},
                      BadCase{"workers: 1000", "workers"}, BadCase{"epochs: 3", "epochs, steps"},
                      BadCase{"rng_impl: fast", "rng_impl"}, BadCase{"device: tpu", "device"},
                      BadCase{"model: {hidden: [1000000, 1000000]}", "model"},
                      BadCase{"steps: 10000000000", "steps"},
                      BadCase{"eval: {batch_size: 3000000000}", "eval.batch_size"},
                      BadCase{"checkpoint_path: /etc/passwd", "checkpoint_path"},
                      BadCase{"checkpoint_path: a/../../b.safetensors", "checkpoint_path"},
                      BadCase{"resume_from: ../other/x.safetensors", "resume_from"},
                      BadCase{"tensorboard_dir: /tmp/tb", "tensorboard_dir"},
                      BadCase{"tensorboard_dir: runs/../../x", "tensorboard_dir"},
                      BadCase{"recovery: {snapshots_kept: 1000}", "recovery.snapshots_kept"}));

TEST(Spec, LongNamesAndHugeSpecsAreRefused) {
  auto spec = ParseSpec(kGood, "spec.yaml");
  ASSERT_OK(spec);
  v1::JobSpec named = *spec;
  named.set_name(std::string(257, 'n'));
  EXPECT_THAT(Validate(named), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  v1::JobSpec huge = *spec;
  huge.set_request_id(std::string(15 << 20, 'r'));
  EXPECT_THAT(Validate(huge), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec")));
  v1::JobSpec fine = *spec;
  fine.set_name(std::string(256, 'n'));
  fine.set_checkpoint_path("runs/cnn..v2.safetensors");  // ".." only as a whole component
  EXPECT_THAT(Validate(fine), testing::IsOk());
}

TEST(Spec, DatasetPathsOutsideTheDataRootsAreRefusedAtSubmitAlikeWhetherOrNotTheyExist) {
  auto spec = ParseSpec(kGood, "spec.yaml");
  ASSERT_OK(spec);
  SpecLimits limits;
  ASSERT_OK_AND_ASSIGN(limits.data_roots, DataRoots::Parse(kDefaultDataRoots));
  EXPECT_THAT(Validate(*spec, limits), testing::IsOk());  // the default dataset
  std::string first;
  for (const std::string path : {"/etc/passwd", "/etc/no-such-file", "/proc/self/environ",
                                 "/usr/share/datasets/../../../etc/passwd", "../../etc"}) {
    v1::JobSpec bad = *spec;
    bad.mutable_dataset()->set_name("mnist");
    bad.mutable_dataset()->set_path(path);
    absl::StatusOr<v1::JobSpec> v = Validate(bad, limits);
    EXPECT_THAT(v, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("dataset.path: \"" + path + "\" is outside the data roots")));
    std::string text(v.status().message());
    text.replace(text.find(path), path.size(), "PATH");
    if (first.empty()) first = text;
    EXPECT_EQ(text, first) << path;
  }
  v1::JobSpec mine = *spec;
  mine.mutable_dataset()->set_path("/data/me/mnist");
  EXPECT_THAT(Validate(mine, limits), testing::IsOk());
  EXPECT_THAT(Validate(mine), testing::IsOk());  // no roots: any path (lockstep train)
}

// At 400deec a model that could not take the installed dataset's images or classes was
// accepted and failed later on a worker, blaming dataset.path.
TEST(Spec, AModelThatCannotFitTheInstalledDatasetIsRefusedNamingItsField) {
  // Validate, then the check the coordinator makes at submit.
  const auto FitsInstalled = [](const std::string& text) -> absl::Status {
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidate(text);
    return spec.ok() ? CheckModelFitsInstalledDataset(*spec) : spec.status();
  };
  const std::string rest =
      "optimizer: {kind: sgd, learning_rate: 0.1}\nglobal_batch_size: 8\nsteps: 2\n";
  EXPECT_THAT(FitsInstalled("model: {kind: cnn, input_shape: [32, 32, 3]}\n" + rest),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.input_shape: [32, 32, 3] does not fit dataset "
                                 "\"fashion_mnist\"")));
  EXPECT_THAT(
      FitsInstalled("model: {layers: [flatten, {dense: {features: 16}}, relu, {dense: "
                    "{features: 5}}, {batch_norm: {}}]}\n" +
                    rest),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("model.layers[3].dense.features: the model's last layer has 5 outputs; "
                         "dataset \"fashion_mnist\" has 10 classes")));
  // More outputs than classes train; another dataset is checked by the workers, who read it.
  EXPECT_OK(FitsInstalled("model: {layers: [flatten, {dense: {features: 12}}]}\n" + rest));
  EXPECT_OK(
      FitsInstalled("model: {kind: cnn, input_shape: [32, 32, 3]}\n"
                    "dataset: {path: /data/cifar}\n" +
                    rest));
}

TEST(Spec, EvalDueFollowsEpochsOrSteps) {
  v1::EvalSpec every_2_epochs;
  every_2_epochs.set_every_epochs(2);
  std::vector<int64_t> due;
  for (int64_t done = 1; done <= 50; ++done) {
    if (EvalDue(every_2_epochs, done, /*steps_per_epoch=*/10)) due.push_back(done);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{20, 40}));

  v1::EvalSpec every_7_steps;
  every_7_steps.set_every_steps(7);
  due.clear();
  for (int64_t done = 1; done <= 20; ++done) {
    if (EvalDue(every_7_steps, done, 10)) due.push_back(done);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{7, 14}));
  EXPECT_FALSE(EvalDue(v1::EvalSpec(), 10, 10));  // no cadence: only the final evaluation
}

TEST(Spec, AnAuditIsOnByDefaultForEveryJob) {
  // Two workers, no BatchNorm, no replicas: every 100 steps unless the spec says otherwise.
  ASSERT_OK_AND_ASSIGN(v1::JobSpec plain, ParseAndValidate(kGood));
  EXPECT_EQ(plain.audit().every_steps(), 100u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec again, Validate(plain));  // a stored spec validated again
  EXPECT_EQ(again.audit().every_steps(), 100u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec off,
                       ParseAndValidate(absl::StrCat(kGood, "audit: {every_steps: 0}\n")));
  EXPECT_TRUE(off.has_audit());
  EXPECT_EQ(off.audit().every_steps(), 0u);
  ASSERT_OK_AND_ASSIGN(off, Validate(off));
  EXPECT_EQ(off.audit().every_steps(), 0u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec audited,
                       ParseAndValidate(absl::StrCat(kGood, "audit: {every_steps: 10}\n")));
  EXPECT_EQ(audited.audit().every_steps(), 10u);
  // One worker: on by default too (audited by replay on another worker), and when asked.
  v1::JobSpec one = plain;
  one.set_workers(1);
  one.clear_audit();
  ASSERT_OK_AND_ASSIGN(v1::JobSpec alone_default, Validate(one));
  EXPECT_EQ(alone_default.audit().every_steps(), 100u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec replicas,
                       ParseAndValidate(absl::StrCat(kGood, "replicas: 4\n")));
  EXPECT_EQ(replicas.audit().every_steps(), 100u);
  v1::JobSpec alone = audited;
  alone.set_workers(1);
  ASSERT_OK_AND_ASSIGN(alone, Validate(alone));
  EXPECT_EQ(alone.audit().every_steps(), 10u);
  EXPECT_THAT(ParseAndValidate(absl::StrCat(kGood, "audit: {every_steps: 2000000000}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("audit.every_steps: must be at most")));
  const std::string batch_norm = R"(
model:
  layers: [{flatten: {}}, {dense: {features: 16}}, {batch_norm: {}}, {relu: {}},
           {dense: {features: 10}}]
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 64
steps: 10
workers: 2
)";
  // BatchNorm on 2 or more workers without `replicas`: audited on logical replicas, one
  // per worker, shown in the validated spec; the audit off keeps the path without them.
  ASSERT_OK_AND_ASSIGN(v1::JobSpec batch_norm_default, ParseAndValidate(batch_norm));
  EXPECT_EQ(batch_norm_default.audit().every_steps(), 100u);
  EXPECT_EQ(batch_norm_default.replicas(), 2u);
  ASSERT_OK_AND_ASSIGN(again, Validate(batch_norm_default));
  EXPECT_EQ(again.replicas(), 2u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec batch_norm_asked,
                       ParseAndValidate(absl::StrCat(batch_norm, "audit: {every_steps: 5}\n")));
  EXPECT_EQ(batch_norm_asked.audit().every_steps(), 5u);
  EXPECT_EQ(batch_norm_asked.replicas(), 2u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec batch_norm_off,
                       ParseAndValidate(absl::StrCat(batch_norm, "audit: {every_steps: 0}\n")));
  EXPECT_EQ(batch_norm_off.audit().every_steps(), 0u);
  EXPECT_EQ(batch_norm_off.replicas(), 0u);
  // A range of workers still needs `replicas` of its own.
  EXPECT_THAT(ParseAndValidate(absl::StrCat(batch_norm, "min_workers: 1\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs `replicas`")));
  // BatchNorm on logical replicas, or on one worker: audited by replay, on by default.
  ASSERT_OK_AND_ASSIGN(v1::JobSpec batch_norm_replicas,
                       ParseAndValidate(absl::StrCat(batch_norm, "replicas: 4\n")));
  EXPECT_EQ(batch_norm_replicas.audit().every_steps(), 100u);
  v1::JobSpec batch_norm_one = batch_norm_default;
  batch_norm_one.set_workers(1);
  batch_norm_one.clear_audit();
  ASSERT_OK_AND_ASSIGN(batch_norm_one, Validate(batch_norm_one));
  EXPECT_EQ(batch_norm_one.audit().every_steps(), 100u);
}

}  // namespace
}  // namespace lockstep
