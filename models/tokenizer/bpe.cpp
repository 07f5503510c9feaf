// The BPE model on one pre-tokenized word, as `tokenizers`' BPE::merge_word + Word::merge_all:
// the word's characters become ids (unknown ones their bytes' "<0xXX>" tokens with
// byte_fallback, else the unk token, if any, else dropped), then the
// pair of lowest merge rank is merged, leftmost first, until no pair has a merge. A heap of
// candidate pairs and a linked list of symbols make that O(n log n) in the word's length.
#include <algorithm>
#include <queue>
#include <string_view>

#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models::tok {
namespace {

struct Symbol {
  std::int32_t id;
  std::int32_t prev;  // index of the previous live symbol, -1 at the start
  std::int32_t next;  // index of the next live symbol, -1 at the end
  bool live;
};

struct Candidate {
  std::int32_t rank;
  std::int32_t pos;  // index of the left symbol
  std::int32_t new_id;
  // std::priority_queue is a max-heap: "less" means a higher rank, then a later position.
  bool operator<(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

}  // namespace

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    // Llama 3: a word that is itself in the vocabulary is one token, whatever the merges say.
    if (const auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](std::int32_t id) {
    const auto n = static_cast<std::int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };
  // A pending unknown: with fuse_unk, consecutive unknown characters become one unk token.
  bool pending_unk = false;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t b = i;
    utf8_next(word, i);
    const auto it = vocab.find(word.substr(b, i - b));
    if (it != vocab.end()) {
      if (pending_unk) add(*unk_id);
      pending_unk = false;
      add(it->second);
    } else if (byte_fallback && std::all_of(word.begin() + b, word.begin() + i, [&](char c) {
                 return byte_ids[static_cast<unsigned char>(c)] >= 0;
               })) {
      // As HF: the bytes' tokens, and a pending unk token stays pending (it follows them).
      for (std::size_t k = b; k < i; ++k) add(byte_ids[static_cast<unsigned char>(word[k])]);
    } else if (unk_id) {
      if (pending_unk && !fuse_unk) add(*unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) add(*unk_id);

  std::priority_queue<Candidate> heap;
  auto push_pair = [&](std::int32_t pos) {
    const std::int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (std::int32_t pos = 0; pos + 1 < static_cast<std::int32_t>(symbols.size()); ++pos)
    push_pair(pos);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    // Stale candidates: the left symbol was merged away, or its right neighbour changed.
    if (!left.live || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;

    left.id = top.new_id;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }

  for (std::int32_t pos = symbols.empty() ? -1 : 0; pos >= 0; pos = symbols[pos].next)
    out.push_back(symbols[pos].id);
}

}  // namespace strata::models::tok
