// QuoteControls: text made safe to print on one line of a log or a terminal.
// Contract: quote_controls.h.
#include "services/common/observability/quote_controls.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

// The length of the valid UTF-8 sequence starting at text[i] (1 to 4), or 0 when there is
// none there (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
size_t Utf8Length(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t lead = b(0);
  if (lead < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// Whether the sequence of `n` bytes at text[i] is printed as it is.
bool Plain(std::string_view text, size_t i, size_t n) {
  const auto lead = static_cast<uint8_t>(text[i]);
  if (n == 1) return lead >= 0x20 && lead != 0x7F && lead != '\\';
  // U+0080..U+009F: C2 80..C2 9F.
  return n != 0 && !(n == 2 && lead == 0xC2 && static_cast<uint8_t>(text[i + 1]) <= 0x9F);
}

}  // namespace

bool NeedsQuoting(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Length(text, i);
    if (!Plain(text, i, n)) return true;
    i += n;
  }
  return false;
}

std::string QuoteControls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Length(text, i);
    if (Plain(text, i, n)) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    // Quoted byte by byte: a C1 control's two bytes, or one otherwise.
    for (size_t k = 0; k < (n == 0 ? 1 : n); ++k, ++i) {
      const char c = text[i];
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\\':
          out += "\\\\";
          break;
        default:
          absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint8_t>(c));
      }
    }
  }
  return out;
}

}  // namespace lockstep
