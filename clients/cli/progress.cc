// A terminal progress bar (step/total, loss, accuracy, samples/s, ETA) that redraws in place on a
// TTY and prints a plain line every few percent elsewhere (logs, CI). Contract: progress.h.
#include "clients/cli/progress.h"

#include <unistd.h>

#include <cmath>

#include "absl/strings/str_format.h"
#include "clients/cli/terminal_text.h"

namespace lockstep::cli {

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

std::string FormatEval(int64_t epoch, int64_t step, double loss, double accuracy) {
  return absl::StrFormat("epoch %d (step %d): test loss %.4f  test accuracy %.4f", epoch, step,
                         loss, accuracy);
}

ProgressBar::ProgressBar(FILE* out) : out_(out), tty_(isatty(fileno(out)) != 0) {}

void ProgressBar::Update(int64_t step, int64_t total, double loss, double accuracy,
                         double samples_per_sec, double eta_sec) {
  const double frac = total > 0 ? static_cast<double>(step) / total : 0;
  std::string acc = accuracy >= 0 ? absl::StrFormat(" acc %.3f", accuracy) : "";
  std::string text = absl::StrFormat("step %d/%d  loss %.4f%s  %.0f samples/s  ETA %s", step, total,
                                     loss, acc, samples_per_sec, FormatDuration(eta_sec));
  if (tty_) {
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    absl::FPrintF(out_, "\r\033[K[%s] %3.0f%% %s", bar, frac * 100, text);
    drawn_ = true;
  } else {
    const int percent = static_cast<int>(frac * 100);
    if (percent / 5 == last_percent_ / 5 && step != total) return;
    last_percent_ = percent;
    absl::FPrintF(out_, "[%3d%%] %s\n", percent, text);
  }
  std::fflush(out_);
}

void ProgressBar::Println(const std::string& line) {
  if (tty_ && drawn_) absl::FPrintF(out_, "\r\033[K");
  absl::FPrintF(out_, "%s\n", line);
  drawn_ = false;
  std::fflush(out_);
}

void EventPrinter::Print(const v1::JobEvent& e) {
  if (e.has_step() && e.step().replay()) {
    // Run again from the snapshot after a recovery or a restart: said, one line a step.
    const auto& s = e.step();
    bar_.Println(absl::StrFormat("replay step %d/%d  loss %.4f (run again from the snapshot)",
                                 s.step(), s.total_steps(), s.loss()));
  } else if (e.has_step()) {
    const auto& s = e.step();
    if (!s.audit().empty()) {
      bar_.Println(absl::StrFormat("audit step %d: %s", s.step(), Printable(s.audit())));
    }
    bar_.Update(s.step(), s.total_steps(), s.loss(), s.accuracy(), s.samples_per_sec(),
                s.eta_sec());
  } else if (e.has_eval()) {
    bar_.Println(FormatEval(e.eval().epoch(), e.eval().step(), e.eval().test_loss(),
                            e.eval().test_accuracy()));
  } else if (e.has_state()) {
    bar_.Println(
        absl::StrFormat("%s %s%s", job_id_, v1::JobState_Name(e.state().state()),
                        e.state().reason().empty() ? "" : ": " + Printable(e.state().reason())));
  }
}

void ProgressBar::Finish() {
  if (tty_ && drawn_) absl::FPrintF(out_, "\n");
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace lockstep::cli
