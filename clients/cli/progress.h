// A terminal progress bar (step/total, loss, accuracy, samples/s, ETA) that redraws in
// place on a TTY and prints a plain line every few percent elsewhere (logs, CI).
#ifndef LOCKSTEP_CLIENTS_CLI_PROGRESS_H_
#define LOCKSTEP_CLIENTS_CLI_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "lockstep/v1/job.pb.h"

namespace lockstep::cli {

class ProgressBar {
 public:
  explicit ProgressBar(FILE* out = stderr);
  // Draws the bar for `step` of `total`; accuracy < 0 hides it.
  void Update(int64_t step, int64_t total, double loss, double accuracy, double samples_per_sec,
              double eta_sec);
  // Prints a line above the bar (evaluations, state changes).
  void Println(const std::string& line);
  void Finish();

 private:
  FILE* out_;
  bool tty_;
  bool drawn_ = false;
  int last_percent_ = -1;
};

// Renders a job's events: steps on the bar, evaluations and state changes as lines.
class EventPrinter {
 public:
  explicit EventPrinter(std::string job_id, FILE* out = stderr)
      : job_id_(std::move(job_id)), bar_(out) {}
  void Print(const v1::JobEvent& event);
  // A line of its own above the bar (e.g. what a queued job waits for).
  void Note(const std::string& line) { bar_.Println(line); }
  void Finish() { bar_.Finish(); }

 private:
  const std::string job_id_;
  ProgressBar bar_;
};

std::string FormatDuration(double seconds);

// The line printed for an evaluation in `epoch` at `step`: "epoch N (step S): test loss X
// test accuracy Y", N counted from 0 as in the JSON (EvalResult.epoch, StepEvent.epoch).
std::string FormatEval(int64_t epoch, int64_t step, double loss, double accuracy);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_PROGRESS_H_
