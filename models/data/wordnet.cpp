#include "models/data/wordnet.hpp"

#include <cstdlib>

#include "models/data/error.hpp"
#include "models/data/file_bytes.hpp"
#include "models/data/text.hpp"

namespace troupe::data {

namespace {

bool all_digits(const std::string& text, std::size_t from, std::size_t count) {
  if (from + count > text.size()) return false;
  for (std::size_t i = from; i < from + count; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  return true;
}

Dataset make_split(const std::vector<Gloss>& glosses, const std::vector<std::int64_t>& indices,
                   const Vocabulary& vocabulary, int length, const char* split) {
  const auto n = static_cast<std::int64_t>(indices.size());
  Dataset out;
  out.name = "wordnet";
  out.split = split;
  out.task = Task::classification;
  out.num_classes = wordnet_classes;
  out.class_names = wordnet_lexicographer_files();
  out.vocabulary = vocabulary.words();
  out.features = kernels::Tensor::empty(kernels::Shape{n, length}, kernels::DType::i32);
  out.labels = kernels::Tensor::empty(kernels::Shape{n}, kernels::DType::i32);
  std::int32_t* x = out.features.i32();
  std::int32_t* y = out.labels.i32();
  for (std::int64_t row = 0; row < n; ++row) {
    const Gloss& gloss = glosses[static_cast<std::size_t>(indices[static_cast<std::size_t>(row)])];
    vocabulary.encode(gloss.text, length, x + row * length);
    y[row] = gloss.label;
  }
  out.validate();
  return out;
}

}  // namespace

const std::vector<std::string>& wordnet_lexicographer_files() {
  static const std::vector<std::string> names = {"adj.all",          "adj.pert",           "adv.all",
                                                 "noun.Tops",        "noun.act",           "noun.animal",
                                                 "noun.artifact",    "noun.attribute",     "noun.body",
                                                 "noun.cognition",   "noun.communication", "noun.event",
                                                 "noun.feeling",     "noun.food",          "noun.group",
                                                 "noun.location",    "noun.motive",        "noun.object",
                                                 "noun.person",      "noun.phenomenon",    "noun.plant",
                                                 "noun.possession",  "noun.process",       "noun.quantity",
                                                 "noun.relation",    "noun.shape",         "noun.state",
                                                 "noun.substance",   "noun.time",          "verb.body",
                                                 "verb.change",      "verb.cognition",     "verb.communication",
                                                 "verb.competition", "verb.consumption",   "verb.contact",
                                                 "verb.creation",    "verb.emotion",       "verb.motion",
                                                 "verb.perception",  "verb.possession",    "verb.social",
                                                 "verb.stative",     "verb.weather",       "adj.ppl"};
  return names;
}

std::vector<Gloss> read_wordnet_glosses(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  std::vector<Gloss> glosses;
  std::int64_t line_number = 0;
  std::size_t start = 0;
  while (start < bytes.size()) {
    auto end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const std::string line = bytes.substr(start, end - start);
    const auto line_offset = static_cast<std::int64_t>(start);
    start = end + 1;
    ++line_number;
    if (line.empty() || line.compare(0, 2, "  ") == 0) continue;  // licence header
    const auto fail = [&](const std::string& what) {
      return DataError(path + ":" + std::to_string(line_number) + ": " + what +
                           " (expected a wndb(5) synset line: offset lex_filenum ss_type ... | gloss)",
                       path, line_offset, line_number);
    };
    if (!all_digits(line, 0, 8) || line.size() < 12 || line[8] != ' ' || !all_digits(line, 9, 2) || line[11] != ' ')
      throw fail("no 8-digit synset_offset and 2-digit lex_filenum at the start");
    const int label = (line[9] - '0') * 10 + (line[10] - '0');
    if (label >= wordnet_classes)
      throw fail("lex_filenum " + line.substr(9, 2) + " is outside [0, " + std::to_string(wordnet_classes) + ")");
    const auto bar = line.find(" | ");
    if (bar == std::string::npos) throw fail("no gloss (' | ')");
    glosses.push_back({label, line.substr(bar + 3)});
  }
  return glosses;
}

Splits load_wordnet(const WordnetOptions& options) {
  std::string directory = options.directory;
  if (directory.empty()) {
    const char* env = std::getenv(wordnet_dir_env);
    directory = env && *env ? env : wordnet_default_dir;
  }
  if (options.sequence_length < 1)
    throw std::invalid_argument("wordnet: sequence_length must be >= 1, got " +
                                std::to_string(options.sequence_length));

  std::string missing;
  std::vector<std::string> paths;
  for (const char* part : {"adj", "adv", "noun", "verb"}) {
    paths.push_back(directory + "/data." + part);
    if (!file_exists(paths.back())) missing += (missing.empty() ? "" : ", ") + paths.back();
  }
  if (!missing.empty())
    throw DataError("wordnet: missing " + missing +
                        "; install the Debian package wordnet-base (scripts/setup.sh does), or point " +
                        wordnet_dir_env + " at a directory holding these files",
                    directory);

  std::vector<Gloss> glosses;
  for (const auto& path : paths) {
    std::vector<Gloss> part = read_wordnet_glosses(path);
    glosses.insert(glosses.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  const SplitIndices split =
      split_indices(static_cast<std::int64_t>(glosses.size()), options.test_fraction, options.seed);
  std::vector<const std::string*> train_texts;
  train_texts.reserve(split.train.size());
  for (const std::int64_t i : split.train) train_texts.push_back(&glosses[static_cast<std::size_t>(i)].text);
  const Vocabulary vocabulary = Vocabulary::build(train_texts, options.vocabulary_size);
  return {make_split(glosses, split.train, vocabulary, options.sequence_length, "train"),
          make_split(glosses, split.test, vocabulary, options.sequence_length, "test")};
}

}  // namespace troupe::data
