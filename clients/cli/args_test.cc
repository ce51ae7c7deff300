// Tests of how the CLI reads its command line (args.h): options before their subcommand
// and underscore spellings, as kubectl users type them.
#include "clients/cli/args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A parser shaped as the CLI's: `list` and `cluster up` with options, `train` a prefix
// command.
class NormalizeArgsTest : public ::testing::Test {
 protected:
  NormalizeArgsTest() : app_(NewApp("test", "lockstep")) {
    CLI::App* list = app_->add_subcommand("list");
    list->add_option("--dir", text_);
    list->add_option("--token-file", text_);
    list->add_flag("--json", flag_);
    list->add_option("-o,--output", text_);
    CLI::App* cluster = app_->add_subcommand("cluster");
    CLI::App* up = cluster->add_subcommand("up");
    up->add_option("--data-root", many_);
    up->add_option("--dir", text_);
    app_->add_subcommand("train")->prefix_command();
  }
  std::vector<std::string> Normalize(std::vector<std::string> args) {
    notes_.clear();
    return NormalizeArgs(*app_, args, &notes_);
  }

  std::unique_ptr<CLI::App> app_;
  std::string text_;
  std::vector<std::string> many_;
  bool flag_ = false;
  std::vector<std::string> notes_;
};

TEST_F(NormalizeArgsTest, OptionsBeforeTheSubcommandMoveAfterIt) {
  EXPECT_THAT(Normalize({"--dir", "D", "list", "--json"}),
              ElementsAre("list", "--dir", "D", "--json"));
  EXPECT_THAT(Normalize({"--json", "-o", "wide", "list"}),
              ElementsAre("list", "--json", "-o", "wide"));
  EXPECT_THAT(Normalize({"cluster", "--dir=D", "up", "--data-root", "x"}),
              ElementsAre("cluster", "up", "--dir=D", "--data-root", "x"));
  EXPECT_THAT(Normalize({"list", "--dir", "D"}), ElementsAre("list", "--dir", "D"));
  EXPECT_THAT(Normalize({"--version"}), ElementsAre("--version"));
  EXPECT_THAT(notes_, IsEmpty());
}

TEST_F(NormalizeArgsTest, UnderscoreSpellingsAreTheDashedOnesWithANote) {
  EXPECT_THAT(Normalize({"cluster", "up", "--data_root", "a", "--data_root=b"}),
              ElementsAre("cluster", "up", "--data-root", "a", "--data-root=b"));
  EXPECT_THAT(notes_, ElementsAre("--data_root is deprecated: use --data-root",
                                  "--data_root is deprecated: use --data-root"));
  EXPECT_THAT(Normalize({"--token_file", "t", "list"}), ElementsAre("list", "--token-file", "t"));
  // Values, unknown options and what follows "--" stay as they are.
  EXPECT_THAT(Normalize({"list", "--dir", "my_dir", "--no_such", "--", "--dir_x"}),
              ElementsAre("list", "--dir", "my_dir", "--no_such", "--", "--dir_x"));
  EXPECT_EQ(notes_.size(), 0u);
}

TEST_F(NormalizeArgsTest, APrefixCommandsArgumentsAreItsOwn) {
  EXPECT_THAT(Normalize({"train", "spec.yaml", "--data_root", "x", "--json"}),
              ElementsAre("train", "spec.yaml", "--data_root", "x", "--json"));
  EXPECT_THAT(Normalize({"--json", "train", "spec.yaml"}),
              ElementsAre("train", "--json", "spec.yaml"));
  EXPECT_THAT(notes_, IsEmpty());
}

}  // namespace
}  // namespace lockstep::cli
