// KILN_INTERNAL: a class only libkiln itself names (a decorator or backend that users and the CUDA
// plugin reach through Backend&): its members, vtable and type information are not exported, which
// keeps hundreds of per-op symbols out of the library's dynamic symbol table. On member functions
// of a class whose type others name (tests cast to it; UBSan's checks then need its type
// information), it hides those members alone.
#pragma once

#define KILN_INTERNAL [[gnu::visibility("hidden")]]
