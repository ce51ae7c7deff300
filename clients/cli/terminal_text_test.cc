// Tests of what the CLI prints of strings it did not write (terminal_text.h).
#include "clients/cli/terminal_text.h"

#include <gtest/gtest.h>

namespace lockstep::cli {
namespace {

// At 0692893 a job name's escape and bell bytes reached the terminal raw (issue 44).
TEST(Printable, QuotesControlCharactersAndKeepsPrintableText) {
  EXPECT_EQ(Printable("mnist run 1 -- ok/100%"), "mnist run 1 -- ok/100%");
  EXPECT_EQ(Printable("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(Printable("\x1b]0;owned\x07\x1b[2J"), "\\x1b]0;owned\\x07\\x1b[2J");
  EXPECT_EQ(Printable(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(Printable("back\\slash"), "back\\slash");
}

TEST(Printable, KeepsUtf8AndQuotesC1ControlsAndBrokenBytes) {
  EXPECT_EQ(Printable("Ünïcødé ✓ 训练 🚀"), "Ünïcødé ✓ 训练 🚀");
  EXPECT_EQ(Printable("\xc2\x9b"
                      "2J"),
            "\\u009b2J");  // C1 CSI, as UTF-8
  EXPECT_EQ(Printable("\x9b"
                      "2J"),
            "\\x9b2J");                                     // a lone 8-bit CSI byte
  EXPECT_EQ(Printable("\xc3"), "\\xc3");                    // truncated
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");           // overlong
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
}

TEST(PrintableLines, KeepsItsOwnLineBreaksOnly) {
  EXPECT_EQ(PrintableLines("{\n  \"name\": \"a\x1b[2J\"\n}"), "{\n  \"name\": \"a\\x1b[2J\"\n}");
}

}  // namespace
}  // namespace lockstep::cli
