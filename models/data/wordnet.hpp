// WordNet glosses as a labelled text corpus (Debian package wordnet-base):
// each synset's gloss is one example, its label the synset's lexicographer
// file (noun.animal, verb.motion, adj.all, ...: 45 classes, much like the 46
// topics of Reuters-21578 that the text CNN was written for).
//
// Source files /usr/share/wordnet/data.{adj,adv,noun,verb}, in the format of
// WordNet's wndb(5) manual page ("WordNet database files"). Lines that begin
// with two spaces are the licence header; every other line is one synset:
//
//   synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...]
//     p_cnt [ptr...] [frames...] | gloss
//   00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 ... | that which is ...
//
// synset_offset: 8 digits; lex_filenum: 2 decimal digits, 00..44, the label
// (names in lexnames(5)); the gloss is everything after "| " (definition and
// quoted examples). Only those fields are read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/data/dataset.hpp"

namespace troupe::data {

constexpr const char* wordnet_default_dir = "/usr/share/wordnet";
constexpr const char* wordnet_dir_env = "TROUPE_WORDNET_DIR";
constexpr int wordnet_classes = 45;

// The 45 lexicographer files by number: "adj.all", "adj.pert", "adv.all",
// "noun.Tops", ..., "adj.ppl".
const std::vector<std::string>& wordnet_lexicographer_files();

struct WordnetOptions {
  std::string directory;        // empty: $TROUPE_WORDNET_DIR, else /usr/share/wordnet
  int sequence_length = 300;    // the text CNN's input length
  int vocabulary_size = 10000;  // V: ids 0 pad, 1 unknown, 2..V-1 words
  double test_fraction = 0.2;
  std::uint64_t seed = 0;  // chooses the test synsets
};

struct Gloss {
  std::int32_t label;  // lex_filenum
  std::string text;
};

// The glosses of one data.* file, in file order. DataError "PATH:LINE: ..."
// for a malformed line.
std::vector<Gloss> read_wordnet_glosses(const std::string& path);

// Both splits: features i32 [N, sequence_length] token ids, labels i32 [N]
// in [0, 45), class names from wordnet_lexicographer_files(), and the
// vocabulary (built from the train split only). Examples are in the order
// data.adj, data.adv, data.noun, data.verb. Missing files: a DataError
// naming them and the Debian package wordnet-base.
Splits load_wordnet(const WordnetOptions& options = {});

}  // namespace troupe::data
