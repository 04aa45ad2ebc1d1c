// In-place memory planning: a kernel's output written into the memory of an intermediate that
// dies in that kernel, when every element is read before it is overwritten.
//
//   kernel k1: b3 = softmax(b0) (stored) ; stats over b3 ; b6 = (b3 - mean) * rstd
//              every access to b3 and b6 is b[1024*x0 + r0]: row x0's elements are read by
//              the statistics, then each is read and written in the same iteration
//   => b3 lives in b6's memory (Buffer::storage = 6): no arena block for b3
//
// The pass (planInPlace) runs inside the memory plan (fusion.cpp), before the arena: it links
// pairs (a, b) where b is first written in the kernel that last touches a, and chains of such
// links share one block (the last one's: a pool block when it is a kernel output, else one arena
// slot). docs/codegen.md, "Memory planning", has the rule and its unsafe shapes.
#pragma once

#include "dynamo/codegen/loop_ir.h"

namespace dynamo::codegen {

/// True when, in kernel k, buffer b may be written over buffer a's memory: a and b have one
/// element type, every load and store of either in k uses one index, injective over k's loops
/// (outer x inner: each element is touched by one iteration of each stage only), and no stage
/// after the first that stores b touches a (that stage may load a: read before written in the
/// same iteration). So a broadcast, transposed or neighbouring read, or a store per outer point
/// while the inner loops read, never qualifies.
bool inPlaceSafe(const Program& p, const Kernel& k, int a, int b);

/// Sets Buffer::storage: for each kernel step, each buffer b first written there (a kernel output
/// or an intermediate) takes the memory of an intermediate a whose last access is that step when
/// inPlaceSafe(a, b) and a's extent fits in b's; chains of links all point at their last
/// buffer. Graph inputs and extern results are never a; a is never accessed after the step.
void planInPlace(Program& p);

/// Bytes from a buffer's first element to one past its last (its strides, all >= 0), or -1 when
/// a stride is negative; 0 for an empty buffer.
int64_t spanBytes(const Buffer& b);

}  // namespace dynamo::codegen
