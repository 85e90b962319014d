import os, sys, time, torch, torch.distributed as dist
def main(rank, world, n, iters):
    os.environ["MASTER_ADDR"]="127.0.0.1"; os.environ["MASTER_PORT"]="29533"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(n)
    for _ in range(20): dist.all_reduce(t)
    dist.barrier()
    ts=[]
    for _ in range(iters):
        s=time.perf_counter(); dist.all_reduce(t); ts.append(time.perf_counter()-s)
    ts.sort()
    if rank==0: print(f"torch gloo {n*4} B: median {ts[len(ts)//2]*1e6:.1f} us, p10 {ts[len(ts)//10]*1e6:.1f}, p90 {ts[9*len(ts)//10]*1e6:.1f}")
    dist.destroy_process_group()
if __name__=="__main__":
    import torch.multiprocessing as mp
    n=int(sys.argv[1]) if len(sys.argv)>1 else 1024
    mp.spawn(main, args=(2, n, 400), nprocs=2)
