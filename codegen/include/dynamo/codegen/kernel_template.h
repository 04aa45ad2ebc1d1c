// Kernels whose sizes are run-time arguments (dynamic shapes: docs/dynamic-shapes.md).
//
// The C++ emitter marks every integer it prints that comes from sizes (loop extents, the
// affine offsets and coefficients of loads and stores, the work that decides OpenMP
// parallelism) and every float constant (a mean's count or batch_norm's 1 / N comes from
// sizes too). Split at those marks, a kernel is a *template*: its text pieces (everything
// else: the structure, the ops, the float constants, every decision the emitter made from a
// value) and its integers.
//
//   lowering at size A:  text T, ints [64, 16, 1024, 1]
//   lowering at size B:  text T, ints [64, 48, 3072, 1]     same T: same kernel family
//   source:  T with ints 0 and 3 as literals, ints 1 and 2 as `dyn_s0`, `dyn_s1`, read from a
//            `const long long*` passed as one more kernel argument (args[n] after the buffers;
//            a CUDA kernel's last parameter, `dyn_params`)
//
// A family is keyed by (scope, text); it remembers the first lowering's integers (the
// reference) and which integers have differed from them so far. A kernel of that family is
// printed with those integers as parameters and the others as literals; each lowering passes
// its own values. So the source (and the compile cache key) is the same for every size whose
// lowering has the same text, and exact for it: the literal integers equal this lowering's, the
// others are its values at run time. A size whose text differs is simply another family. No
// assumption about how sizes enter the integers (affine or not) is needed for correctness.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dynamo::codegen {

/// Marks in the emitter's text: kSizeIntOpen <decimal> kSizeIntClose around a size integer;
/// kParamsOpen <args index> kParamsClose where the parameter reads are declared.
inline constexpr char kSizeIntOpen = '\x01';
inline constexpr char kSizeIntClose = '\x02';
/// Ends the digits (before kSizeIntClose) of a double constant's bit pattern: its literal is
/// printf's "%.17g" of the double (as the emitter prints float constants), its parameter a
/// `double` read from the same array.
inline constexpr char kSizeDouble = 'd';
inline constexpr char kParamsOpen = '\x03';
inline constexpr char kParamsClose = '\x04';
/// Before a parameter mark's index: the array is the kernel parameter kParamsArgumentName (a CUDA
/// kernel's), not args[index] (a C++ kernel's `void* const* args`). A template may have several
/// parameter marks (the CUDA kernel and its host shim), all for the same array: each gets the
/// declarations.
inline constexpr char kParamsArgument = 'c';
/// After a parameter mark's index: '+' and how many entries of the array come before the size
/// parameters (the Python numbers the kernel reads at call time, declared by the emitter).
inline constexpr char kParamsScalars = '+';
inline constexpr const char* kParamsArgumentName = "dyn_params";

/// A marked kernel source split into text and integers.
struct KernelTemplate {
  std::vector<std::string> text;  ///< ints.size() + 1 pieces; kParamsOpen stands where the
                                  ///< parameter declarations go
  std::vector<int64_t> ints;      ///< the size integers, in print order (a double: its bits)
  std::vector<bool> isDouble;     ///< per integer: a double constant (kSizeDouble)
  int argIndex = -1;              ///< the kernel argument that holds the parameter array
  bool paramsArgument = false;    ///< the array is the parameter `dyn_params` (CUDA), not args[]
  int firstParam = 0;             ///< index of dyn_s0 in the array (the call-time scalars come first)
};

/// Splits marked source (the emitter's). Internal error on malformed marks.
KernelTemplate splitMarked(const std::string& marked);

/// The source with every integer a literal ("64LL", or "0.5" for a double), as the static
/// emitter prints it.
std::string literalSource(const std::string& marked);

/// One kernel's source for one lowering, and the parameter array it takes.
struct SizedKernel {
  std::string source;           ///< the C++ source
  std::vector<int64_t> params;  ///< values of dyn_s0, dyn_s1, ... (empty: a static kernel)
};

/// The kernel of template t in family `scope`. The first template of a (scope, text) pair is
/// its reference. parametrise false: the literal source (the reference is recorded, so that a
/// later parametrised lowering of the same scope knows the static sizes). parametrise true: the
/// integers that differ from the reference in this or any earlier parametrised lowering of the
/// family are parameters. Thread-safe.
SizedKernel sizeKernel(const KernelTemplate& t, const std::string& scope, bool parametrise);

/// t with the integers flagged in `dynamic` read from the parameter array (values appended to
/// *params in order), the others literal.
std::string renderTemplate(const KernelTemplate& t, const std::vector<bool>& dynamic, std::vector<int64_t>* params);

}  // namespace dynamo::codegen
