// QuoteControls: text made safe to print on one line of a log or a terminal. Every byte a
// terminal or a log reader could take for more than a character is written out as an
// escape: newline, carriage return and tab as \n, \r, \t; the other C0 controls, DEL, and
// the C1 controls (U+0080..U+009F, which some terminals obey as ESC sequences) as \xNN
// (each byte of their UTF-8); a byte that is not part of valid UTF-8 as \xNN; and the
// backslash itself as \\, so that an escape in the output always means a quoted byte.
// Printable text, UTF-8 included, is kept as it is.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_QUOTE_CONTROLS_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_QUOTE_CONTROLS_H_

#include <string>
#include <string_view>

namespace lockstep {

std::string QuoteControls(std::string_view text);

// Whether QuoteControls(text) would change it (the common case, false, costs one scan).
bool NeedsQuoting(std::string_view text);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_QUOTE_CONTROLS_H_
