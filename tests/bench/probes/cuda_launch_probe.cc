// cuda_launch_probe: in-process CUDA driver costs that bound the daemon's figures, on the GPU
// host (GPU run 84, docs/gpu-runs.md):
//   * a CUDA graph node and a stream launch by kernel parameter size (none / 640 B, a builtin's
//     CudaBuiltinArgs) and with one store, 1 or 256 threads: does a compact argument block
//     shorten replayed nodes (P11) or launches (P2)?
//   * the parts of a 4-byte read as the loop's inline read does it (cuStreamQuery, copies into
//     pageable and pinned memory, synchronous and async + sync): what bounds L1.
//   * what a launch of a builtin's 640 B costs the launching thread alone (256 launches into an
//     idle stream, the queue never full), by how its arguments are passed (kernelParams, `extra`,
//     cuLaunchKernelEx), against the rate of 20,000 in a row: is P2's baseline the CPU's or the
//     queue's? And a batch of 32 launches as the replay of an instantiated 32-node graph whose
//     nodes' arguments are set anew each time (cuGraphExecKernelNodeSetParams): GPU run 85.
//     Short runs of 2 to 32 launches either way (Note [Launch batches]): GPU run 87.
// Not part of the build (no GPU where it builds); here, with the toolkit's stub libcuda:
//   g++ -O2 -std=c++17 -o cuda_launch_probe tests/bench/probes/cuda_launch_probe.cc \
//     -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
// and run it there (it loads the driver's libcuda.so.1). Prints medians [min..max].
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
static const char kPtx[] = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry e0() { ret; }
.visible .entry e640(.param .align 8 .b8 a[640]) { ret; }
.visible .entry s8(.param .u64 p) {
  .reg .pred %p; .reg .u32 %r; .reg .u64 %d; .reg .f32 %f;
  mov.u32 %r, %tid.x; setp.ne.u32 %p, %r, 0; @%p bra DONE;
  ld.param.u64 %d, [p]; cvta.to.global.u64 %d, %d; mov.f32 %f, 0f3F800000; st.global.f32 [%d], %f;
DONE: ret; }
.visible .entry s640(.param .align 8 .b8 a[640]) {
  .reg .pred %p; .reg .u32 %r; .reg .u64 %d; .reg .f32 %f;
  mov.u32 %r, %tid.x; setp.ne.u32 %p, %r, 0; @%p bra DONE;
  ld.param.u64 %d, [a+8]; cvta.to.global.u64 %d, %d; mov.f32 %f, 0f3F800000; st.global.f32 [%d], %f;
DONE: ret; }
)";
#define CK(x)                    \
  do {                           \
    CUresult r_ = (x);           \
    if (r_ != CUDA_SUCCESS) {    \
      const char* s;             \
      cuGetErrorString(r_, &s);  \
      printf("%s: %s\n", #x, s); \
      return 1;                  \
    }                            \
  } while (0)
int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmodule m;
  CK(cuModuleLoadData(&m, kPtx));
  CUstream st;
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buf;
  CK(cuMemAlloc(&buf, 256));
  alignas(8) unsigned char big[640] = {};
  memcpy(big + 8, &buf, 8);
  struct K {
    const char* name;
    unsigned threads;
    void** params;
  } ks[] = {{"e0", 1, nullptr},
            {"e0", 256, nullptr},
            {"e640", 256, nullptr},
            {"s8", 256, nullptr},
            {"s640", 256, nullptr}};
  void* p8[] = {&buf};
  void* p640[] = {big};
  ks[2].params = p640;
  ks[3].params = p8;
  ks[4].params = p640;
  const int nodes = 1000, replays = 20;
  for (int round = 0; round < 2; ++round)
    for (auto& k : ks) {
      CUfunction f;
      CK(cuModuleGetFunction(&f, m, k.name));
      CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      for (int i = 0; i < nodes; ++i)
        CK(cuLaunchKernel(f, 1, 1, 1, k.threads, 1, 1, 0, st, k.params, nullptr));
      CUgraph g;
      CK(cuStreamEndCapture(st, &g));
      CUgraphExec ge;
      CK(cuGraphInstantiate(&ge, g, 0));
      std::vector<double> ns;
      for (int r = -1; r < 5; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < replays; ++i) CK(cuGraphLaunch(ge, st));
        CK(cuStreamSynchronize(st));
        double dt =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 0) ns.push_back(dt / (nodes * replays));
      }
      std::sort(ns.begin(), ns.end());
      std::vector<double> ls;
      for (int r = -1; r < 5; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20000; ++i)
          CK(cuLaunchKernel(f, 1, 1, 1, k.threads, 1, 1, 0, st, k.params, nullptr));
        CK(cuStreamSynchronize(st));
        double dt =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 0) ls.push_back(dt / 20000);
      }
      std::sort(ls.begin(), ls.end());
      printf(
          "round %d %-5s threads %3u: graph node %.3f us [%.3f..%.3f]; stream launch %.3f us "
          "[%.3f..%.3f]\n",
          round, k.name, k.threads, ns[2] / 1e3, ns[0] / 1e3, ns[4] / 1e3, ls[2] / 1e3, ls[0] / 1e3,
          ls[4] / 1e3);
      cuGraphExecDestroy(ge);
      cuGraphDestroy(g);
    }
  // A builtin-sized launch's cost to the launching thread alone, by how its arguments travel.
  {
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "s640"));
    size_t size640 = sizeof big;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, big, CU_LAUNCH_PARAM_BUFFER_SIZE, &size640,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig config = {};
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 256;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = st;
    struct Way {
      const char* name;
      int kind;
    } ways[] = {{"kernelParams", 0}, {"extra", 1}, {"cuLaunchKernelEx", 2}};
    auto launch = [&](int kind) {
      if (kind == 0) return cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, p640, nullptr);
      if (kind == 1) return cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, nullptr, extra);
      return cuLaunchKernelEx(&config, f, p640, nullptr);
    };
    for (int round = 0; round < 2; ++round)
      for (const Way& w : ways) {
        std::vector<double> alone, row;
        for (int r = -1; r < 9; ++r) {
          CK(cuStreamSynchronize(st));
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 256; ++i) CK(launch(w.kind));
          double dt =
              std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                  .count();
          if (r >= 0) alone.push_back(dt / 256);
        }
        for (int r = -1; r < 5; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 20000; ++i) CK(launch(w.kind));
          CK(cuStreamSynchronize(st));
          double dt =
              std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                  .count();
          if (r >= 0) row.push_back(dt / 20000);
        }
        std::sort(alone.begin(), alone.end());
        std::sort(row.begin(), row.end());
        printf(
            "round %d s640 %-16s: launching thread %.3f us [%.3f..%.3f] a launch (256 into an "
            "idle stream); 20,000 in a row %.3f us [%.3f..%.3f]\n",
            round, w.name, alone[4] / 1e3, alone[0] / 1e3, alone[8] / 1e3, row[2] / 1e3,
            row[0] / 1e3, row[4] / 1e3);
      }
    // 32 launches as one replay of a 32-node graph, each node's arguments set before the replay.
    const int batch = 32;
    CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < batch; ++i) CK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, p640, nullptr));
    CUgraph g;
    CK(cuStreamEndCapture(st, &g));
    size_t count = batch;
    std::vector<CUgraphNode> graph_nodes(batch);
    CK(cuGraphGetNodes(g, graph_nodes.data(), &count));
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    CUDA_KERNEL_NODE_PARAMS kp = {};
    kp.func = f;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 256;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = p640;
    for (int round = 0; round < 2; ++round) {
      std::vector<double> set_ns, all_ns;
      for (int r = -1; r < 5; ++r) {
        double set = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (int rep = 0; rep < 20000 / batch; ++rep) {
          auto s0 = std::chrono::steady_clock::now();
          for (size_t i = 0; i < count; ++i)
            CK(cuGraphExecKernelNodeSetParams(ge, graph_nodes[i], &kp));
          set += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - s0)
                     .count();
          CK(cuGraphLaunch(ge, st));
        }
        CK(cuStreamSynchronize(st));
        double dt =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        const double launches = double(20000 / batch) * batch;
        if (r >= 0) {
          set_ns.push_back(set / launches);
          all_ns.push_back(dt / launches);
        }
      }
      std::sort(set_ns.begin(), set_ns.end());
      std::sort(all_ns.begin(), all_ns.end());
      printf(
          "round %d s640 as a %d-node graph replay, arguments set each time: %.3f us a launch "
          "[%.3f..%.3f], of it setting arguments %.3f us\n",
          round, batch, all_ns[2] / 1e3, all_ns[0] / 1e3, all_ns[4] / 1e3, set_ns[2] / 1e3);
    }
    cuGraphExecDestroy(ge);
    cuGraphDestroy(g);
    // Short runs: what N launches cost the launching thread as N stream launches and as the
    // replay of an N-node chain with its arguments set (medians of 300, the stream idle before
    // each): from which N a replay pays (GPU run 87).
    for (int n : {2, 3, 4, 6, 8, 16, 32}) {
      CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      for (int i = 0; i < n; ++i) CK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, p640, nullptr));
      CUgraph gn;
      CK(cuStreamEndCapture(st, &gn));
      size_t cn = n;
      std::vector<CUgraphNode> nn(n);
      CK(cuGraphGetNodes(gn, nn.data(), &cn));
      CUgraphExec gen;
      CK(cuGraphInstantiate(&gen, gn, 0));
      std::vector<double> direct, replay;
      for (int r = -20; r < 300; ++r) {
        CK(cuStreamSynchronize(st));
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) CK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, p640, nullptr));
        auto t1 = std::chrono::steady_clock::now();
        CK(cuStreamSynchronize(st));
        auto t2 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < cn; ++i) CK(cuGraphExecKernelNodeSetParams(gen, nn[i], &kp));
        CK(cuGraphLaunch(gen, st));
        auto t3 = std::chrono::steady_clock::now();
        if (r >= 0) {
          direct.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          replay.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
        }
      }
      CK(cuStreamSynchronize(st));
      std::sort(direct.begin(), direct.end());
      std::sort(replay.begin(), replay.end());
      printf(
          "run of %2d: %2d stream launches %.2f us, chain replay with arguments set %.2f us "
          "(launching thread)\n",
          n, n, direct[150], replay[150]);
      cuGraphExecDestroy(gen);
      cuGraphDestroy(gn);
    }
  }
  // A 4-byte read's parts in-process (what the loop's inline read does), medians of 2000.
  auto med = [&](auto&& body) {
    std::vector<double> v;
    for (int i = -200; i < 2000; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      body();
      double dt =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 0) v.push_back(dt);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  float pageable = 0;
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, 4, 0));
  CUcontext cur;
  printf("cuCtxGetCurrent %.3f us\n", med([&] { cuCtxGetCurrent(&cur); }));
  printf("cuCtxSetCurrent %.3f us\n", med([&] { cuCtxSetCurrent(ctx); }));
  printf("cuStreamQuery (idle) %.3f us\n", med([&] { cuStreamQuery(st); }));
  printf("DtoHAsync pageable + StreamSynchronize %.3f us\n", med([&] {
           cuMemcpyDtoHAsync(&pageable, buf, 4, st);
           cuStreamSynchronize(st);
         }));
  printf("DtoHAsync pinned + StreamSynchronize %.3f us\n", med([&] {
           cuMemcpyDtoHAsync(pinned, buf, 4, st);
           cuStreamSynchronize(st);
         }));
  printf("DtoH (sync) pageable %.3f us\n", med([&] { cuMemcpyDtoH(&pageable, buf, 4); }));
  printf("DtoH (sync) pinned %.3f us\n", med([&] { cuMemcpyDtoH(pinned, buf, 4); }));
  printf("StreamQuery + DtoHAsync pageable + sync %.3f us\n", med([&] {
           cuStreamQuery(st);
           cuMemcpyDtoHAsync(&pageable, buf, 4, st);
           cuStreamSynchronize(st);
         }));
  CUevent ev;
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  printf("DtoHAsync pinned + event record + spin query %.3f us\n", med([&] {
           cuMemcpyDtoHAsync(pinned, buf, 4, st);
           cuEventRecord(ev, st);
           while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {
           }
         }));
  printf("launch s8 + DtoHAsync pageable + sync %.3f us\n", med([&] {
           CUfunction f;
           cuModuleGetFunction(&f, m, "s8");
           cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, st, p8, nullptr);
           cuMemcpyDtoHAsync(&pageable, buf, 4, st);
           cuStreamSynchronize(st);
         }));
  return 0;
}
