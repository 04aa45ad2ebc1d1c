// Kernel templates and families (kernel_template.h): size integers as kernel parameters.
#include "dynamo/codegen/kernel_template.h"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/common/error.h"

namespace dynamo::codegen {
namespace {

// A family: the reference lowering's integers and which have differed from them so far.
struct Family {
  std::vector<int64_t> ref;   // the first lowering's integers
  std::vector<bool> dynamic;  // per integer: has differed in a parametrised lowering
};

std::mutex gFamiliesMu;
std::unordered_map<std::string, Family>& families() {
  static auto* m = new std::unordered_map<std::string, Family>();  // process lifetime
  return *m;
}

// The family's key: a hash of the scope and the text (families live as long as the process,
// as loaded kernels do; a kernel's text is kilobytes, its hash 64 bytes).
std::string familyKey(const KernelTemplate& t, const std::string& scope) {
  std::string key = scope;
  key += '\0';
  key += std::to_string(t.argIndex);
  key += t.paramsArgument ? 'c' : 'a';
  key += std::to_string(t.firstParam);
  for (size_t i = 0; i < t.text.size(); ++i) {
    key += i < t.isDouble.size() && t.isDouble[i] ? kSizeDouble : kSizeIntOpen;
    key += t.text[i];
  }
  return sha256Hex(key);
}

std::string literal(int64_t v) { return std::to_string(v) + "LL"; }

// As the emitter's number() prints a float constant.
std::string doubleLiteral(int64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

KernelTemplate splitMarked(const std::string& marked) {
  KernelTemplate t;
  std::string piece;
  for (size_t i = 0; i < marked.size(); ++i) {
    char c = marked[i];
    if (c != kSizeIntOpen && c != kParamsOpen) {
      piece += c;
      continue;
    }
    char close = c == kSizeIntOpen ? kSizeIntClose : kParamsClose;
    size_t end = marked.find(close, i + 1);
    DYNAMO_INTERNAL_ASSERT(end != std::string::npos, "kernel template: unterminated mark at ", i);
    std::string digits = marked.substr(i + 1, end - i - 1);
    bool isDouble = c == kSizeIntOpen && !digits.empty() && digits.back() == kSizeDouble;
    if (isDouble) digits.pop_back();
    bool argument = c == kParamsOpen && !digits.empty() && digits.front() == kParamsArgument;
    if (argument) digits.erase(0, 1);
    int scalars = 0;
    size_t plus = c == kParamsOpen ? digits.find(kParamsScalars) : std::string::npos;
    if (plus != std::string::npos) {
      scalars = std::stoi(digits.substr(plus + 1));
      digits.resize(plus);
    }
    int64_t v = std::stoll(digits);
    if (c == kSizeIntOpen) {
      t.text.push_back(std::move(piece));
      piece.clear();
      t.ints.push_back(v);
      t.isDouble.push_back(isDouble);
    } else {
      DYNAMO_INTERNAL_ASSERT(t.argIndex < 0 || (t.argIndex == v && t.paramsArgument == argument &&
                                                 t.firstParam == scalars),
                             "kernel template: parameter marks for two arrays");
      t.argIndex = static_cast<int>(v);
      t.paramsArgument = argument;
      t.firstParam = scalars;
      piece += kParamsOpen;
    }
    i = end;
  }
  t.text.push_back(std::move(piece));
  return t;
}

std::string literalSource(const std::string& marked) {
  KernelTemplate t = splitMarked(marked);
  return renderTemplate(t, std::vector<bool>(t.ints.size(), false), nullptr);
}

std::string renderTemplate(const KernelTemplate& t, const std::vector<bool>& dynamic, std::vector<int64_t>* params) {
  std::string decls;
  int next = 0;
  std::string body;
  for (size_t i = 0; i < t.text.size(); ++i) {
    body += t.text[i];
    if (i == t.ints.size()) break;
    if (!dynamic[i]) {
      body += t.isDouble[i] ? doubleLiteral(t.ints[i]) : literal(t.ints[i]);
      continue;
    }
    std::string name = "dyn_s" + std::to_string(next), at = "dyn_p[" + std::to_string(t.firstParam + next) + "]";
    if (t.isDouble[i] && t.paramsArgument) {  // CUDA: NVRTC has no __builtin_memcpy (emitCuda's helper)
      decls += "  const double " + name + " = dyn_bits_double(" + at + ");\n";
    } else if (t.isDouble[i]) {
      decls += "  double " + name + ";\n  __builtin_memcpy(&" + name + ", &" + at + ", 8);\n";
    } else {
      decls += "  const long long " + name + " = " + at + ";\n";
    }
    body += name;
    if (params) params->push_back(t.ints[i]);
    ++next;
  }
  if (next > 0) {
    DYNAMO_INTERNAL_ASSERT(t.argIndex >= 0, "kernel template: size parameters but no parameter mark");
    std::string array = t.paramsArgument ? std::string(kParamsArgumentName)
                                          : "(const long long*)args[" + std::to_string(t.argIndex) + "]";
    decls = "  const long long* __restrict__ dyn_p = " + array + ";  // this size's integers\n" + decls;
  }
  for (size_t at = body.find(kParamsOpen); at != std::string::npos; at = body.find(kParamsOpen, at + decls.size()))
    body.replace(at, 1, decls);
  return body;
}

SizedKernel sizeKernel(const KernelTemplate& t, const std::string& scope, bool parametrise) {
  std::vector<bool> dynamic(t.ints.size(), false);
  if (t.argIndex >= 0) {
    std::lock_guard<std::mutex> g(gFamiliesMu);
    auto [it, fresh] = families().try_emplace(familyKey(t, scope));
    Family& f = it->second;
    if (fresh) {
      f.ref = t.ints;
      f.dynamic.assign(t.ints.size(), false);
    }
    if (parametrise) {
      for (size_t i = 0; i < t.ints.size(); ++i) {
        if (t.ints[i] != f.ref[i]) f.dynamic[i] = true;
      }
      dynamic = f.dynamic;
    }
  }
  SizedKernel out;
  out.source = renderTemplate(t, dynamic, &out.params);
  return out;
}

}  // namespace dynamo::codegen
