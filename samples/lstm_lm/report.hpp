#pragma once
/// \file
/// The pictures and page of `lstm_lm train --report DIR`: the loss curve and the pipeline
/// timeline as hand-written SVG, and an index.html that shows both with the run's figures.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "strata/lm/trainer.hpp"
#include "strata/pipeline/simulator.hpp"

namespace lstm_lm {

/// One point of a curve.
struct curve_point {
  double step = 0;
  double value = 0;
};

/// SVG of the training loss per step (thin), its moving average (thick) and the validation
/// loss (markers), in nats.
std::string loss_curve_svg(const std::vector<curve_point>& train, const std::vector<curve_point>& validation);

/// SVG of a pipeline timeline (one row per stage; forwards and backwards in distinct colours,
/// labelled with their micro-batch, and chunk when `chunks` > 1); times in milliseconds.
std::string timeline_svg(const std::vector<strata::pipeline::timeline_entry>& timeline, int stages, int chunks,
                         const std::string& title);

/// index.html showing loss.svg and timeline.svg above a table of `figures` (name, value).
std::string index_html(const std::string& title, const std::vector<std::pair<std::string, std::string>>& figures,
                       const std::string& plan_text);

/// `v` with `prec` digits after the point ("%.*f"), for the report and the progress lines.
std::string fmt(double v, int prec = 2);

/// `lstm_lm train --report DIR`: writes loss.svg, timeline.svg and index.html of the run `r` into
/// `dir` (created when missing) and returns index.html's path. Throws std::runtime_error when a
/// file cannot be written.
std::string write_report(const strata::lm::training_result& r, const std::string& dir);

}  // namespace lstm_lm
