// How the CUDA plugin leaves a process: in a fixed order, whatever the timing.
//
// What runs while a process ends (exit(), which a return from main calls):
//  1. the thread_local destructors of the thread that called exit(): C++ runs them before any
//     static destructor or atexit handler ([basic.start.term]; glibc's exit() calls them first);
//  2. static destructors and atexit handlers, the last registered first: among them the driver's
//     own teardown (registered in cuInit, before anything of kiln) and the teardown of whatever
//     intercepts the driver (compute-sanitizer injects itself into it), which may register lazily,
//     e.g. at its first kernel launch: after anything kiln registered at plugin start;
//  3. the fini functions of every loaded library (libcuda.so.1 among them).
// Meanwhile a launcher thread per GPU (dispatcher.h) may be inside cuLaunchKernel with up to 1024
// launches still queued. A driver (or a tool in it) torn down under that thread, by a handler of
// step 2 registered after kiln's, is the likely cause of the SIGSEGV compute-sanitizer showed on a
// child that exited with queued launches (the fake driver of tests/gpu/fake_driver reproduces that
// order, and the old exit path failed on it every time).
//
// The order kiln keeps:
//  - Every thread that queues a launch arms a thread_local guard (arm_this_thread). In the main
//    thread its destructor runs in step 1: every ring is closed (later launches are made on the
//    calling thread), each launcher hands what is queued to the driver itself (its own thread,
//    whose driver state nothing has touched yet) and is joined. So no kiln thread is in the
//    driver when the first handler of step 2 runs, whoever registered it and whenever.
//    In any other thread the guard only waits until the launches queued so far are with the
//    driver (a worker ending is not the process ending): a program whose main thread never
//    launched still exits with empty rings once it has joined its workers, and exit() called from
//    a worker first waits for them too.
//  - An atexit handler registered with the first launcher stops them all as well: the fallback for
//    exit() from another thread and for a main thread that never launched (it runs after the
//    handlers registered later than itself, the case above; it is all that can be done there).
//  - Nothing of the plugin is destroyed at exit: the backends (contexts, streams, dispatchers,
//    allocator caches, module caches, cuBLASLt handles) and the plugin's function-local statics
//    are leaked on purpose, so no destructor calls a driver that may be gone, and the memory goes
//    with the process. Tensors freed by static destructors return their blocks to the allocator's
//    cache without a driver call; the rare frees that would call the driver skip it once exiting().
//  - The plugin is never unloaded (src/runtime/cuda_plugin.cpp opens it RTLD_NODELETE): its code
//    stays mapped while any of the above runs.
//  - A forked child has no launcher threads (fork copies only the calling thread): stopping there
//    joins nothing, calls no driver, and leaves the parent's queue to the parent.
//  - A thread still launching while the process ends launches on its own thread once the rings
//    are closed, as in any CUDA program; ending the process under it is that program's race.
#pragma once

namespace kiln::cuda {

class Dispatcher;

namespace shutdown {

// A dispatcher with a launcher thread: stopped at exit until removed (its destructor).
void add(Dispatcher* dispatcher);
void remove(Dispatcher* dispatcher) noexcept;

// Called by a thread about to queue a launch; arms that thread's guard the first time.
void arm_this_thread();

// True once the process is exiting: frees that would call the driver leak instead.
bool exiting() noexcept;

}  // namespace shutdown
}  // namespace kiln::cuda
