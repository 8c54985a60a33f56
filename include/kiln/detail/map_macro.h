// KILN_MAP_EACH(f, a, b, c) -> f(a), f(b), f(c): applies a macro to each of up to 16 arguments.
// Used for the member lists of modules and the argument lists of ops.def.
#pragma once

#define KILN_MAP_1(f, a) f(a)
#define KILN_MAP_2(f, a, ...) f(a), KILN_MAP_1(f, __VA_ARGS__)
#define KILN_MAP_3(f, a, ...) f(a), KILN_MAP_2(f, __VA_ARGS__)
#define KILN_MAP_4(f, a, ...) f(a), KILN_MAP_3(f, __VA_ARGS__)
#define KILN_MAP_5(f, a, ...) f(a), KILN_MAP_4(f, __VA_ARGS__)
#define KILN_MAP_6(f, a, ...) f(a), KILN_MAP_5(f, __VA_ARGS__)
#define KILN_MAP_7(f, a, ...) f(a), KILN_MAP_6(f, __VA_ARGS__)
#define KILN_MAP_8(f, a, ...) f(a), KILN_MAP_7(f, __VA_ARGS__)
#define KILN_MAP_9(f, a, ...) f(a), KILN_MAP_8(f, __VA_ARGS__)
#define KILN_MAP_10(f, a, ...) f(a), KILN_MAP_9(f, __VA_ARGS__)
#define KILN_MAP_11(f, a, ...) f(a), KILN_MAP_10(f, __VA_ARGS__)
#define KILN_MAP_12(f, a, ...) f(a), KILN_MAP_11(f, __VA_ARGS__)
#define KILN_MAP_13(f, a, ...) f(a), KILN_MAP_12(f, __VA_ARGS__)
#define KILN_MAP_14(f, a, ...) f(a), KILN_MAP_13(f, __VA_ARGS__)
#define KILN_MAP_15(f, a, ...) f(a), KILN_MAP_14(f, __VA_ARGS__)
#define KILN_MAP_16(f, a, ...) f(a), KILN_MAP_15(f, __VA_ARGS__)
#define KILN_MAP_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, name, \
                      ...)                                                                         \
  name
#define KILN_MAP_EACH(f, ...)                                                                 \
  KILN_MAP_PICK(__VA_ARGS__, KILN_MAP_16, KILN_MAP_15, KILN_MAP_14, KILN_MAP_13, KILN_MAP_12, \
                KILN_MAP_11, KILN_MAP_10, KILN_MAP_9, KILN_MAP_8, KILN_MAP_7, KILN_MAP_6,     \
                KILN_MAP_5, KILN_MAP_4, KILN_MAP_3, KILN_MAP_2, KILN_MAP_1)                   \
  (f, __VA_ARGS__)
