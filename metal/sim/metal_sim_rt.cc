// metal_sim_rt.cc - the runtime of the Linux kernel simulation: the kernel
// registry and a dispatcher that runs each threadgroup's threads, as
// ucontext fibres when the kernel uses threadgroup barriers (all threads of a
// group run up to the barrier before any passes it), else one after another.
// Tests only; one dispatch at a time (not thread-safe).
//
// A fibre starts with setcontext and then switches with _setjmp/_longjmp,
// which do not save the signal mask (swapcontext's two system calls per
// switch dominated the run time). Every switch is annotated for
// AddressSanitizer (__sanitizer_{start,finish}_switch_fiber).
#undef _FORTIFY_SOURCE // __longjmp_chk rejects jumps between stacks
#include <setjmp.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define MD_SIM_ASAN 1
#endif

#include "metal_sim.h"
#include "metal_sim_run.h"

namespace {

struct entry {
    md_sim_raw fn;
    md_sim_thunk thunk;
};

std::map<std::string, entry> &registry()
{
    static std::map<std::string, entry> r;
    return r;
}

const size_t stack_bytes = 256 * 1024;

struct fibre {
    ucontext_t ctx;
    jmp_buf jb;
    bool started;
    std::unique_ptr<char[]> stack; // uninitialised: untouched pages cost nothing
    md_sim_call call;
    entry e;
    bool done;
};

struct scheduler {
    ucontext_t main;
    jmp_buf main_jb;
    std::vector<fibre> fibres;
    fibre *current = nullptr;
    bool in_group = false;
#ifdef MD_SIM_ASAN
    void *fake_stack = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
#endif
};

scheduler sched;

void fibre_main(unsigned lo, unsigned hi)
{
    fibre *f = reinterpret_cast<fibre *>((static_cast<uintptr_t>(hi) << 32) | lo);
#ifdef MD_SIM_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched.main_bottom, &sched.main_size);
#endif
    f->e.thunk(f->e.fn, &f->call);
    f->done = true;
#ifdef MD_SIM_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched.main_bottom, sched.main_size);
#endif
    _longjmp(sched.main_jb, 1);
}

// Runs fibre f until it reaches a barrier or ends.
void resume(fibre *f)
{
    sched.current = f;
    if (!_setjmp(sched.main_jb)) {
#ifdef MD_SIM_ASAN
        __sanitizer_start_switch_fiber(&sched.fake_stack, f->stack.get(), stack_bytes);
#endif
        if (!f->started) {
            f->started = true;
            setcontext(&f->ctx);
        }
        _longjmp(f->jb, 1);
    }
#ifdef MD_SIM_ASAN
    __sanitizer_finish_switch_fiber(sched.fake_stack, nullptr, nullptr);
#endif
    sched.current = nullptr;
}

void run_group_fibres(const entry &e, const md_sim_call &base, unsigned nthreads)
{
    if (sched.fibres.size() < nthreads) sched.fibres.resize(nthreads);
    for (unsigned t = 0; t < nthreads; t++) {
        fibre &f = sched.fibres[t];
        if (!f.stack) f.stack.reset(new char[stack_bytes]);
        f.call = base;
        f.call.lid = {t % base.tgsz.x, (t / base.tgsz.x) % base.tgsz.y, t / (base.tgsz.x * base.tgsz.y)};
        f.call.gid = {base.tgid.x * base.tgsz.x + f.call.lid.x, base.tgid.y * base.tgsz.y + f.call.lid.y,
                      base.tgid.z * base.tgsz.z + f.call.lid.z};
        f.e = e;
        f.done = false;
        f.started = false;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.get();
        f.ctx.uc_stack.ss_size = stack_bytes;
        f.ctx.uc_link = &sched.main;
        uintptr_t p = reinterpret_cast<uintptr_t>(&f);
        makecontext(&f.ctx, reinterpret_cast<void (*)()>(fibre_main), 2, static_cast<unsigned>(p & 0xffffffffu),
                    static_cast<unsigned>(p >> 32));
    }
    sched.in_group = true;
    // Rounds: every live fibre runs to its next barrier (or its end).
    for (;;) {
        unsigned live = 0;
        for (unsigned t = 0; t < nthreads; t++) {
            fibre &f = sched.fibres[t];
            if (f.done) continue;
            resume(&f);
            if (!f.done) live++;
        }
        if (!live) break;
    }
    sched.in_group = false;
}

} // namespace

void md_sim_register(const char *name, md_sim_raw fn, md_sim_thunk thunk)
{
    registry()[name] = entry{fn, thunk};
}

void metal::threadgroup_barrier(metal::mem_flags)
{
    if (!sched.current) {
        std::fprintf(stderr, "metal sim: threadgroup_barrier in a kernel planned without barriers\n");
        std::abort();
    }
    fibre *f = sched.current;
    if (!_setjmp(f->jb)) {
#ifdef MD_SIM_ASAN
        __sanitizer_start_switch_fiber(nullptr, sched.main_bottom, sched.main_size);
#endif
        _longjmp(sched.main_jb, 1);
    }
#ifdef MD_SIM_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched.main_bottom, &sched.main_size);
#endif
}

extern "C" int md_metal_sim_kernel_count(void) { return static_cast<int>(registry().size()); }

extern "C" int md_metal_sim_has(const char *name) { return registry().count(name) != 0; }

extern "C" md_status md_metal_sim_run(const struct md_metal_plan *p, float *scratch)
{
    for (int di = 0; di < p->n; di++) {
        const md_metal_dispatch &d = p->d[di];
        auto it = registry().find(d.name);
        if (it == registry().end()) return md_errf(MD_ERR_INTERNAL, "metal sim: no kernel named '%s'", d.name);
        void *bufs[MD_METAL_MAX_BUFS];
        for (int i = 0; i < MD_METAL_MAX_BUFS; i++)
            bufs[i] = i < d.nbufs ? ((d.scratch_mask >> i) & 1u ? static_cast<void *>(scratch) : d.bufs[i]) : nullptr;
        std::vector<float> tgmem(d.tg_mem / sizeof(float) + 1);
        md_sim_call base;
        base.params = d.params;
        base.bufs = bufs;
        base.tgsz = {d.tg[0], d.tg[1], d.tg[2]};
        base.ngrp = {d.grid[0], d.grid[1], d.grid[2]};
        base.tg = tgmem.data();
        unsigned nthreads = d.tg[0] * d.tg[1] * d.tg[2];
        for (uint z = 0; z < d.grid[2]; z++)
            for (uint y = 0; y < d.grid[1]; y++)
                for (uint x = 0; x < d.grid[0]; x++) {
                    base.tgid = {x, y, z};
                    // fresh garbage in threadgroup memory for every group
                    for (auto &v : tgmem) v = NAN;
                    if (d.barriers) {
                        run_group_fibres(it->second, base, nthreads);
                        continue;
                    }
                    md_sim_call c = base;
                    for (uint t = 0; t < nthreads; t++) {
                        c.lid = {t % d.tg[0], (t / d.tg[0]) % d.tg[1], t / (d.tg[0] * d.tg[1])};
                        c.gid = {x * d.tg[0] + c.lid.x, y * d.tg[1] + c.lid.y, z * d.tg[2] + c.lid.z};
                        it->second.thunk(it->second.fn, &c);
                    }
                }
    }
    return MD_OK;
}
