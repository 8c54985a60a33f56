// Reading the columns of ops.def in the preprocessor, for the places that generate code from it.
//
//   KILN_IMPL_CPU(impl), KILN_IMPL_CUDA(impl), KILN_IMPL_GRAD(impl),
//   KILN_IMPL_STRIDED(impl), KILN_IMPL_FUSE(impl), KILN_IMPL_HEAD(impl),
//   KILN_IMPL_HOST(impl), KILN_IMPL_VALUE_SHAPE(impl)               1 or 0 for a letter of impl
//   KILN_WHEN(condition)(tokens)                                     tokens when condition is 1
//   KILN_AND(a, b)                                                   1 when both are 1
//   KILN_IS_PROBE(token)                                             1 when token expands to
//                                                                    KILN_PROBE, else 0
//
// For example, the CPU backend declares the ops whose impl has a C by defining
//   KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp)
// as KILN_WHEN(KILN_IMPL_CPU(impl))(result name params override;) around an include of ops.def.
#pragma once

// impl as eight bits: the CPU backend, the CUDA backend, autodiff, the shared strided base
// (StridedBackend, which both the CPU and the CUDA backend derive; S excludes C and G), the fusion
// decorator (F: recorded lazily and fused, src/decorators/fusion/), a product heading its fused
// group (H, with F), and what a capture refuses: values moved to the host or another device (R),
// a result whose shape depends on the values (V).
#define KILN_IMPL_BITS_CGDFH 1, 1, 1, 0, 1, 1, 0, 0
#define KILN_IMPL_BITS_CGDF 1, 1, 1, 0, 1, 0, 0, 0
#define KILN_IMPL_BITS_CGDR 1, 1, 1, 0, 0, 0, 1, 0
#define KILN_IMPL_BITS_CGDV 1, 1, 1, 0, 0, 0, 0, 1
#define KILN_IMPL_BITS_CGD 1, 1, 1, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_CGF 1, 1, 0, 0, 1, 0, 0, 0
#define KILN_IMPL_BITS_CGR 1, 1, 0, 0, 0, 0, 1, 0
#define KILN_IMPL_BITS_CGV 1, 1, 0, 0, 0, 0, 0, 1
#define KILN_IMPL_BITS_CG 1, 1, 0, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_CDF 1, 0, 1, 0, 1, 0, 0, 0
#define KILN_IMPL_BITS_CD 1, 0, 1, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_GD 0, 1, 1, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_GR 0, 1, 0, 0, 0, 0, 1, 0
#define KILN_IMPL_BITS_C 1, 0, 0, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_G 0, 1, 0, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_DF 0, 0, 1, 0, 1, 0, 0, 0
#define KILN_IMPL_BITS_D 0, 0, 1, 0, 0, 0, 0, 0
#define KILN_IMPL_BITS_SD 0, 0, 1, 1, 0, 0, 0, 0
#define KILN_IMPL_BITS_S 0, 0, 0, 1, 0, 0, 0, 0
#define KILN_IMPL_BITS_R 0, 0, 0, 0, 0, 0, 1, 0
#define KILN_IMPL_BITS_NONE 0, 0, 0, 0, 0, 0, 0, 0

// The arguments are expanded before the call, so a column's token becomes its bits first.
#define KILN_COLUMN_CALL(macro, arguments) macro arguments
#define KILN_COLUMN_CPU_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) cpu
#define KILN_COLUMN_CUDA_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) cuda
#define KILN_COLUMN_GRAD_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) grad
#define KILN_COLUMN_STRIDED_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) strided
#define KILN_COLUMN_FUSE_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) fuse
#define KILN_COLUMN_HEAD_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) head
#define KILN_COLUMN_HOST_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) host
#define KILN_COLUMN_VALUE_SHAPE_BIT(cpu, cuda, grad, strided, fuse, head, host, value_shape) \
  value_shape
#define KILN_IMPL_CPU(impl) KILN_COLUMN_CALL(KILN_COLUMN_CPU_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_CUDA(impl) KILN_COLUMN_CALL(KILN_COLUMN_CUDA_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_GRAD(impl) KILN_COLUMN_CALL(KILN_COLUMN_GRAD_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_STRIDED(impl) KILN_COLUMN_CALL(KILN_COLUMN_STRIDED_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_FUSE(impl) KILN_COLUMN_CALL(KILN_COLUMN_FUSE_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_HEAD(impl) KILN_COLUMN_CALL(KILN_COLUMN_HEAD_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_HOST(impl) KILN_COLUMN_CALL(KILN_COLUMN_HOST_BIT, (KILN_IMPL_BITS_##impl))
#define KILN_IMPL_VALUE_SHAPE(impl) \
  KILN_COLUMN_CALL(KILN_COLUMN_VALUE_SHAPE_BIT, (KILN_IMPL_BITS_##impl))

#define KILN_WHEN(condition) KILN_WHEN_EXPANDED(condition)
#define KILN_WHEN_EXPANDED(condition) KILN_WHEN_##condition
#define KILN_WHEN_1(...) __VA_ARGS__
#define KILN_WHEN_0(...)

#define KILN_AND(a, b) KILN_AND_EXPANDED(a, b)
#define KILN_AND_EXPANDED(a, b) KILN_AND_##a##b
#define KILN_AND_11 1
#define KILN_AND_10 0
#define KILN_AND_01 0
#define KILN_AND_00 0

// A yes/no question about a pasted name: define the names that mean yes as KILN_PROBE; any other
// name stays a single token and reads as 0. E.g. to pick the float ops of form UNARY:
//   #define KILN_FLOAT_UNARY_UNARY_F KILN_PROBE
//   KILN_IS_PROBE(KILN_FLOAT_UNARY_##form##_##kinds)
#define KILN_PROBE ~, 1
#define KILN_IS_PROBE(...) KILN_COLUMN_SECOND(__VA_ARGS__, 0, ~)
#define KILN_COLUMN_SECOND(first, second, ...) second
