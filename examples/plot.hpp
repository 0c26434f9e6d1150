// Rendering the examples' plots: a gnuplot script written by the example,
// run by gnuplot when it is installed. Shared by mode_switch_experiment and
// elastic. Nothing here is troupe's API.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace examples {

enum class Plot { drawn, no_gnuplot, failed };

// Runs gnuplot on `script` (which names its own output file). A gnuplot
// built without cairo refuses the `pngcairo` terminal: the script is then
// rewritten to `png` and run once more.
inline Plot render_plot(const std::string& script) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) return Plot::no_gnuplot;
  const std::string run = "gnuplot '" + script + "'";
  if (std::system((run + " 2>/dev/null").c_str()) == 0) return Plot::drawn;
  std::string text;
  {
    std::ifstream in(script);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = text.find("pngcairo");
  if (at == std::string::npos) return Plot::failed;
  text.replace(at, 8, "png");
  {
    std::ofstream out(script, std::ios::trunc);
    out << text;
    if (!out.flush()) return Plot::failed;
  }
  return std::system(run.c_str()) == 0 ? Plot::drawn : Plot::failed;
}

}  // namespace examples
