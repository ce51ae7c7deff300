// What the CLI prints of strings it did not write itself, control characters quoted.
// Contract: terminal_text.h.
#include "clients/cli/terminal_text.h"

#include "absl/strings/str_format.h"

namespace lockstep::cli {
namespace {

// The length of the valid UTF-8 sequence at the start of `s` (2 to 4), or 0 if there is
// none (an ASCII byte, a stray continuation byte, an overlong or truncated sequence).
size_t Utf8Length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char lead = b(0);
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (lead == 0xED && b(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (lead == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x80) {  // other C0 controls, DEL
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    } else if (const size_t n = Utf8Length(text.substr(i)); n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    } else if (c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {  // C1 controls
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(text[i + 1]));
      i += 2;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string PrintableLines(std::string_view text) {
  std::string out;
  for (size_t at = 0;;) {
    const size_t end = text.find('\n', at);
    out += Printable(text.substr(at, end - at));
    if (end == std::string_view::npos) return out;
    out += '\n';
    at = end + 1;
  }
}

}  // namespace lockstep::cli
