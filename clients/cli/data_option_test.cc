#include "clients/cli/data_option.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing.h"

namespace lockstep::cli {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

TEST(DataOption, IdxReplacesThePath) {
  v1::DatasetSpec d;
  d.set_path("/usr/share/datasets/fashion-mnist");
  ASSERT_OK(ApplyDataFolder("/home/me/mnist", &d));
  EXPECT_EQ(d.path(), "/home/me/mnist");
  v1::DatasetSpec explicit_idx;
  explicit_idx.set_format("idx");
  ASSERT_OK(ApplyDataFolder("here", &explicit_idx));
  EXPECT_EQ(explicit_idx.path(), "here");
  EXPECT_EQ(explicit_idx.train_path(), "");
}

TEST(DataOption, NpzReadsRelativePathsFromTheFolderAndDefaultsTheFileNames) {
  v1::DatasetSpec d;
  d.set_format("npz");
  d.set_train_path("splits/train-v2.npz");
  ASSERT_OK(ApplyDataFolder("/data/mine", &d));
  EXPECT_EQ(d.train_path(), "/data/mine/splits/train-v2.npz");
  EXPECT_EQ(d.test_path(), "/data/mine/test.npz");
  EXPECT_EQ(d.path(), "");  // an idx field, untouched
  v1::DatasetSpec bare;
  bare.set_format("npz");
  ASSERT_OK(ApplyDataFolder("rel/dir/", &bare));
  EXPECT_EQ(bare.train_path(), "rel/dir/train.npz");
  EXPECT_EQ(bare.test_path(), "rel/dir/test.npz");
}

TEST(DataOption, NpzRefusesAnAbsolutePathNamingIt) {
  v1::DatasetSpec d;
  d.set_format("npz");
  d.set_train_path("train.npz");
  d.set_test_path("/elsewhere/test.npz");
  EXPECT_THAT(ApplyDataFolder("/data/mine", &d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--data /data/mine: dataset.test_path is absolute "
                                 "(/elsewhere/test.npz)")));
}

TEST(DataOption, AnUnknownFormatIsRefused) {
  v1::DatasetSpec d;
  d.set_format("tfrecord");
  EXPECT_THAT(ApplyDataFolder("/data", &d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.format: \"tfrecord\" is not idx or npz")));
}

}  // namespace
}  // namespace lockstep::cli
