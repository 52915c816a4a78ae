// analyzers_bench: how fast the analyzers turn text into terms, per core,
// beside the peer the issue names: a plain ICU word BreakIterator loop over
// the same UTF-8 (UText, status filter, no normalization) in the same run.
// Corpora are generated here (English-like 1 KB and 300 KB documents,
// Chinese text); prints medians of several runs and the machine.
#include <unicode/brkiter.h>
#include <unicode/uversion.h>
#include <unicode/utext.h>

#include <algorithm>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "analyzers/analyzer.h"
#include "bench/machine.h"

namespace {

using corvid::analyzers::Analyzer;
using corvid::analyzers::Token;
using corvid::analyzers::TokenSink;

// Common English words, most frequent first; drawn with a Zipf-like law.
const char* const kEnglishWords[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family",
    "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
    "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
    "community", "name", "president", "team", "minute", "idea", "kid", "body", "information",
    "back", "parent", "face", "others", "level", "office", "door", "health", "person", "art",
    "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy",
    "moment", "air", "teacher", "force", "education", "running", "walked", "connected",
    "generally", "happiness", "organization", "international", "development", "relationships",
    "understanding", "particularly", "environmental", "considered", "experiences", "indexing",
    "searching", "documents", "analyzers", "don't", "it's", "can't", "O'Brien", "e.g.", "U.S.",
    "New", "York", "London", "Monday", "January", "Internet", "Corvid", "ICU", "HTTP", "API"};

std::string EnglishText(std::mt19937_64& rng, size_t bytes) {
  const size_t n = sizeof(kEnglishWords) / sizeof(kEnglishWords[0]);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::string out;
  bool sentence_start = true;
  while (out.size() < bytes) {
    // Zipf-like: index ~ n^u - 1, so low indexes dominate.
    const size_t i = std::min(n - 1, static_cast<size_t>(std::pow(static_cast<double>(n), u(rng))) - 1);
    std::string word = kEnglishWords[i];
    if (sentence_start && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 32);
    sentence_start = false;
    out += word;
    const double r = u(rng);
    if (r < 0.02) {
      out += ' ';
      out += std::to_string(rng() % 10000);
    }
    if (r > 0.97) out += " 3.14";
    const double p = u(rng);
    if (p < 0.07) {
      out += ". ";
      sentence_start = true;
    } else if (p < 0.13) {
      out += ", ";
    } else if (p < 0.135) {
      out += "\n\n";
      sentence_start = true;
    } else {
      out += ' ';
    }
  }
  out.resize(bytes);
  return out;
}

// Common Chinese words (UTF-8) and punctuation.
const char* const kChineseWords[] = {
    "我们", "中国", "发展", "经济", "社会", "问题", "工作", "时间", "国家", "人民", "政府", "企业",
    "技术", "市场", "文化", "教育", "学生", "老师", "城市", "历史", "世界", "研究", "管理", "信息",
    "网络", "公司", "北京", "上海", "今天", "明天", "已经", "可以", "需要", "进行", "通过", "认为",
    "的", "了", "是", "在", "和", "有", "不", "这", "也", "就", "都", "而", "要", "把", "被", "从",
    "搜索", "索引", "文档", "分析", "数据", "系统", "服务器", "用户", "程序", "计算机"};

std::string ChineseText(std::mt19937_64& rng, size_t bytes) {
  const size_t n = sizeof(kChineseWords) / sizeof(kChineseWords[0]);
  std::string out;
  while (out.size() < bytes) {
    out += kChineseWords[rng() % n];
    const uint64_t r = rng() % 100;
    if (r < 6) out += "\xEF\xBC\x8C";       // ，
    else if (r < 9) out += "\xE3\x80\x82";  // 。
  }
  return out;
}

struct Corpus {
  std::string name;
  std::vector<std::string> docs;
  size_t bytes = 0;
};

Corpus MakeCorpus(std::string name, size_t doc_bytes, size_t total_bytes,
                  const std::function<std::string(std::mt19937_64&, size_t)>& gen) {
  std::mt19937_64 rng(42);
  Corpus c;
  c.name = std::move(name);
  while (c.bytes < total_bytes) {
    c.docs.push_back(gen(rng, doc_bytes));
    c.bytes += c.docs.back().size();
  }
  return c;
}

class CountingSink : public TokenSink {
 public:
  void OnToken(const Token& t) override {
    ++tokens;
    checksum += t.term.size() + t.position;
  }
  uint64_t tokens = 0;
  uint64_t checksum = 0;
};

// The peer: ICU's word BreakIterator over UTF-8 through a UText, created
// once and reused, counting segments whose status is not UBRK_WORD_NONE.
class IcuLoop {
 public:
  IcuLoop() {
    UErrorCode status = U_ZERO_ERROR;
    bi_.reset(icu::BreakIterator::createWordInstance(icu::Locale::getRoot(), status));
    if (U_FAILURE(status)) std::abort();
  }
  ~IcuLoop() { utext_close(&text_); }
  uint64_t Run(const std::string& doc) {
    UErrorCode status = U_ZERO_ERROR;
    utext_openUTF8(&text_, doc.data(), static_cast<int64_t>(doc.size()), &status);
    bi_->setText(&text_, status);
    uint64_t words = 0;
    for (int32_t b = bi_->next(); b != icu::BreakIterator::DONE; b = bi_->next()) {
      words += bi_->getRuleStatus() >= UBRK_WORD_NONE_LIMIT;
    }
    return words;
  }

 private:
  std::unique_ptr<icu::BreakIterator> bi_;
  UText text_ = UTEXT_INITIALIZER;
};

// CPU time of this thread, so "per core" holds even when other processes
// share the machine's cores.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timing {
  double cpu;
  double wall;
};

Timing Seconds(const std::function<uint64_t()>& fn, uint64_t* result) {
  const double c0 = ThreadCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  *result = fn();
  const auto t1 = std::chrono::steady_clock::now();
  const double c1 = ThreadCpuSeconds();
  return {c1 - c0, std::chrono::duration<double>(t1 - t0).count()};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


}  // namespace

int main(int argc, char** argv) {
  // Usage: analyzers_bench [runs] [method]  (method: only that one beside the peer)
  int runs = 7;
  if (argc > 1) runs = std::max(1, std::atoi(argv[1]));
  const std::string only = argc > 2 ? argv[2] : "";
  std::printf("analyzers_bench: one thread; MB/s per core = input bytes / thread CPU time,\n"
              "median of %d runs (wall-clock medians beside; the same text for every method)\n",
              runs);
  std::printf("machine: %s; ICU %s\n", corvid::bench::MachineDescription().c_str(), U_ICU_VERSION);

  const std::vector<Corpus> corpora = {
      MakeCorpus("english 1KB docs", 1024, 16 << 20, EnglishText),
      MakeCorpus("english 300KB docs", 300 * 1024, 16 << 20, EnglishText),
      MakeCorpus("chinese 300KB docs", 300 * 1024, 8 << 20, ChineseText),
  };
  const Analyzer* standard = corvid::analyzers::FindAnalyzer("standard").value();
  const Analyzer* english = corvid::analyzers::FindAnalyzer("english").value();
  IcuLoop icu_loop;

  struct Method {
    const char* name;
    std::function<uint64_t(const std::string&)> run;
  };
  const std::vector<Method> methods = {
      {"icu word-break loop (peer)", [&](const std::string& d) { return icu_loop.Run(d); }},
      {"standard", [&](const std::string& d) {
         CountingSink s;
         (void)standard->Analyze(d, s);
         return s.tokens;
       }},
      {"english", [&](const std::string& d) {
         CountingSink s;
         (void)english->Analyze(d, s);
         return s.tokens;
       }},
      {"standard, ICU-only path", [&](const std::string& d) {
         CountingSink s;
         (void)standard->AnalyzeWithIcuOnly(d, s);
         return s.tokens;
       }},
  };

  for (const Corpus& corpus : corpora) {
    std::printf("\n%s: %zu docs, %.1f MB\n", corpus.name.c_str(), corpus.docs.size(),
                static_cast<double>(corpus.bytes) / 1e6);
    std::vector<std::vector<double>> mbps(methods.size());
    std::vector<std::vector<double>> wall_mbps(methods.size());
    std::vector<uint64_t> tokens(methods.size());
    for (int r = 0; r <= runs; ++r) {  // run 0 warms caches and is dropped
      for (size_t m = 0; m < methods.size(); ++m) {
        if (m > 0 && !only.empty() && methods[m].name != only) continue;
        uint64_t count = 0;
        const Timing t = Seconds(
            [&] {
              uint64_t total = 0;
              for (const auto& d : corpus.docs) total += methods[m].run(d);
              return total;
            },
            &count);
        tokens[m] = count;
        if (r > 0) {
          mbps[m].push_back(static_cast<double>(corpus.bytes) / 1e6 / t.cpu);
          wall_mbps[m].push_back(static_cast<double>(corpus.bytes) / 1e6 / t.wall);
        }
      }
    }
    const double peer = Median(mbps[0]);
    for (size_t m = 0; m < methods.size(); ++m) {
      if (mbps[m].empty()) continue;
      const double med = Median(mbps[m]);
      std::printf("  %-28s %7.1f MB/s  (min %6.1f, max %6.1f; wall median %6.1f)  %5.2fx peer  tokens=%llu\n",
                  methods[m].name, med, *std::min_element(mbps[m].begin(), mbps[m].end()),
                  *std::max_element(mbps[m].begin(), mbps[m].end()), Median(wall_mbps[m]),
                  med / peer, static_cast<unsigned long long>(tokens[m]));
    }
  }
  return 0;
}
