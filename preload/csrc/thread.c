/* The entry of every thread the profiled program creates. It is C, not Rust, because
 * `pthread_exit` and `pthread_cancel` end a thread by force-unwinding its stack, and the
 * preload library is built with panic = "abort": an unwind that meets one of its Rust frames
 * aborts the whole program (CPython ends daemon threads at exit exactly this way). Here the
 * only frame of ours on the thread's stack is this one, which the unwinder passes through,
 * running the cleanup that deletes the thread's CPU timer. */
#include <pthread.h>

struct mlprof_thread_start {
    void *(*routine)(void *);
    void *arg;
    /* Announces the thread and arms its timer; frees the block (read the fields first). */
    void (*begin)(void *block);
    /* Deletes the thread's timer: on return, on pthread_exit and on cancellation. */
    void (*end)(void *unused);
};

__attribute__((visibility("hidden"))) void *mlprof_thread_trampoline(void *block) {
    struct mlprof_thread_start start = *(struct mlprof_thread_start *)block;
    void *result;
    start.begin(block);
    pthread_cleanup_push(start.end, 0);
    result = start.routine(start.arg);
    pthread_cleanup_pop(1);
    return result;
}
