// Text tokenisation and vocabularies; WordNet glosses, parsed from small
// files and from the real wordnet-base files.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <set>

#include "models/data/error.hpp"
#include "models/data/load.hpp"
#include "models/data/text.hpp"
#include "models/data/wordnet.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

using kernels::Shape;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

TEST(DataText, TokenizeLowerCasesWordRuns) {
  EXPECT_EQ(tokenize("Don't STOP -- the 2nd time!"),
            (std::vector<std::string>{"don", "t", "stop", "the", "2nd", "time"}));
  EXPECT_TRUE(tokenize(" ;; ").empty());
}

TEST(DataText, VocabularyByFrequencyThenWord) {
  const std::string a = "b a c a", b = "c a d";
  const Vocabulary v = Vocabulary::build({&a, &b}, 4);
  // a: 3, c: 2, b and d: 1 each (b wins the tie), cut at 4 ids.
  EXPECT_EQ(v.words(), (std::vector<std::string>{"<pad>", "<unk>", "a", "c"}));
  EXPECT_EQ(v.id("c"), 3);
  EXPECT_EQ(v.id("b"), unknown_token);
  std::vector<std::int32_t> ids(6, -1);
  v.encode("A c zebra", 6, ids.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{2, 3, 1, 0, 0, 0}));
  v.encode("a a c c a", 3, ids.data());  // truncated at the end
  EXPECT_EQ(std::vector<std::int32_t>(ids.begin(), ids.begin() + 3), (std::vector<std::int32_t>{2, 2, 3}));
  EXPECT_THROW(Vocabulary::build({}, 1), std::invalid_argument);
}

const char* const licence = "  1 This software and database is being provided to you\n";

void write_small_wordnet(const TempDir& dir) {
  write_file(dir.file("data.noun"),
             std::string(licence) +
                 "00001740 03 n 01 entity 0 000 | that which is perceived  \n"
                 "00002137 05 n 01 dog 0 001 @ 00001740 n 0000 | a Domestic dog; \"the dog barked\"  \n");
  write_file(dir.file("data.verb"), std::string(licence) + "00001740 29 v 01 breathe 0 000 01 + 02 00 | draw air  \n");
  write_file(dir.file("data.adj"), std::string(licence) + "00001740 00 a 01 able 0 000 | having the dog skill  \n");
  write_file(dir.file("data.adv"), std::string(licence) + "00001837 02 r 01 barely 0 000 | only just  \n");
}

TEST(DataWordnet, ParsesSmallFiles) {
  TempDir dir;
  write_small_wordnet(dir);
  const auto glosses = read_wordnet_glosses(dir.file("data.noun"));
  ASSERT_EQ(glosses.size(), 2u);
  EXPECT_EQ(glosses[1].label, 5);
  EXPECT_EQ(glosses[1].text, "a Domestic dog; \"the dog barked\"  ");

  WordnetOptions options;
  options.directory = dir.path();
  options.test_fraction = 0.0;
  options.sequence_length = 5;
  const Splits s = load_wordnet(options);
  EXPECT_EQ(s.train.size(), 5);
  EXPECT_EQ(s.test.size(), 0);
  EXPECT_EQ(s.train.features.shape(), (Shape{5, 5}));
  // Order adj, adv, noun, verb; labels are lex_filenum.
  EXPECT_EQ(s.train.labels.to_int_vector(), (std::vector<std::int32_t>{0, 2, 3, 5, 29}));
  EXPECT_EQ(s.train.vocabulary.at(2), "dog");  // 3 times, the most frequent word
  EXPECT_EQ(s.train.class_names.at(5), "noun.animal");
  const auto ids = s.train.features.to_int_vector();
  EXPECT_EQ(ids[2], 2);  // "having the dog": dog is id 2
}

TEST(DataWordnet, MalformedLinesAndMissingFiles) {
  TempDir dir;
  write_small_wordnet(dir);
  write_file(dir.file("data.adv"), std::string(licence) + "00001837 02 r 01 barely 0 000 | only just\n00001838 02 r\n");
  const std::string gloss = error_of<DataError>([&] { read_wordnet_glosses(dir.file("data.adv")); });
  EXPECT_NE(gloss.find(dir.file("data.adv") + ":3: no gloss"), std::string::npos) << gloss;
  write_file(dir.file("data.adv"), "00001837 47 r 01 barely 0 000 | only just\n");
  const std::string lex = error_of<DataError>([&] { read_wordnet_glosses(dir.file("data.adv")); });
  EXPECT_NE(lex.find(":1: lex_filenum 47 is outside [0, 45)"), std::string::npos) << lex;
  write_file(dir.file("data.adv"), "garbage\n");
  EXPECT_THROW(read_wordnet_glosses(dir.file("data.adv")), DataError);

  std::filesystem::remove(dir.file("data.verb"));
  WordnetOptions options;
  options.directory = dir.path();
  const std::string missing = error_of<DataError>([&] { load_wordnet(options); });
  EXPECT_NE(missing.find(dir.file("data.verb")), std::string::npos) << missing;
  EXPECT_NE(missing.find("install the Debian package wordnet-base"), std::string::npos) << missing;
  EXPECT_EQ(missing.find(dir.file("data.noun")), std::string::npos) << missing;
}

TEST(DataWordnet, RealDebianCorpus) {
  if (!std::filesystem::exists(std::string(wordnet_default_dir) + "/data.noun"))
    GTEST_SKIP() << wordnet_default_dir << " not present: install wordnet-base";
  WordnetOptions options;
  options.directory = wordnet_default_dir;
  options.sequence_length = 40;  // the real 300 only costs memory here
  const Splits s = load_wordnet(options);
  EXPECT_EQ(s.train.size() + s.test.size(), 117659);  // WordNet 3.0 synsets
  EXPECT_EQ(s.test.size(), 23532);                    // round(20%)
  EXPECT_EQ(s.train.num_classes, 45);
  EXPECT_EQ(s.train.vocabulary.size(), 10000u);
  EXPECT_EQ(s.train.features.shape(), (Shape{s.train.size(), 40}));
  std::set<std::int32_t> classes;
  const std::int32_t* y = s.train.labels.i32();
  for (std::int64_t i = 0; i < s.train.size(); ++i) classes.insert(y[i]);
  EXPECT_EQ(classes.size(), 45u);
  // Token ids in range; few unknowns with V = 10000.
  std::int64_t unknown = 0, words = 0;
  for (const std::int32_t id : s.train.features.to_int_vector()) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 10000);
    words += id != pad_token;
    unknown += id == unknown_token;
  }
  EXPECT_LT(static_cast<double>(unknown) / static_cast<double>(words), 0.1);

  // Deterministic: the same options give the same tensors.
  LoadOptions by_name;
  by_name.wordnet = options;
  const Splits again = load_dataset("wordnet", by_name);
  EXPECT_EQ(again.test.labels.to_int_vector(), s.test.labels.to_int_vector());
  EXPECT_EQ(again.test.features.to_int_vector(), s.test.features.to_int_vector());
  EXPECT_EQ(again.train.vocabulary, s.train.vocabulary);
  std::cout << "wordnet: train " << s.train.size() << ", test " << s.test.size() << ", unknown rate "
            << static_cast<double>(unknown) / static_cast<double>(words) << "\n";
}

}  // namespace
}  // namespace troupe::data
