/* Preloaded into TSan test runs by tools/ci/sanitizers.sh: routes oneTBB's scalable_malloc /
 * scalable_free (strata's envelope allocator, runtime/src/actor.cpp) to malloc / free, which TSan
 * intercepts. tbbmalloc recycles memory between threads through free lists TSan cannot see (it is
 * not built with -fsanitize=thread), so every reuse of an envelope's memory would be reported as a
 * race. libtbb's own internal use of tbbmalloc (dlopen + dlsym on its handle) is unaffected. */
#include <stdlib.h>

void* scalable_malloc(size_t size) { return malloc(size); }
void scalable_free(void* ptr) { free(ptr); }
