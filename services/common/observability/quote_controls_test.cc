#include "services/common/observability/quote_controls.h"

#include "core/testing.h"

namespace lockstep {
namespace {

TEST(QuoteControls, PrintableTextAndUtf8StayAsTheyAre) {
  for (const std::string text : {"", "job-000001-ab", "/data/train (2).npz", "Größe 学习 ✓"}) {
    EXPECT_FALSE(NeedsQuoting(text)) << text;
    EXPECT_EQ(QuoteControls(text), text);
  }
}

TEST(QuoteControls, ControlsAreQuotedAndTheBackslashToo) {
  EXPECT_EQ(QuoteControls("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(QuoteControls("\x1b[2J\x07"), "\\x1b[2J\\x07");
  EXPECT_EQ(QuoteControls(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(QuoteControls("C:\\x1b"), "C:\\\\x1b");  // a literal backslash is never an escape
  EXPECT_TRUE(NeedsQuoting("a\\b"));
}

TEST(QuoteControls, C1ControlsAndInvalidUtf8AreQuotedByteByByte) {
  EXPECT_EQ(QuoteControls("a\xc2\x9b"
                          "31mb"),
            "a\\xc2\\x9b31mb");                                 // U+009B: CSI
  EXPECT_EQ(QuoteControls("\xc2\xa0"), "\xc2\xa0");             // U+00A0 is printable
  EXPECT_EQ(QuoteControls("\x9b\xff"), "\\x9b\\xff");           // stray bytes
  EXPECT_EQ(QuoteControls("\xe2\x82"), "\\xe2\\x82");           // cut short
  EXPECT_EQ(QuoteControls("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(QuoteControls("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
}

}  // namespace
}  // namespace lockstep
