/* cuda_dist.h - NCCL collectives of the CUDA plug-in (backend.h
 * md_dev_comm_*): one communicator per open device, all-reduce on the
 * device's stream. Built without NCCL (MD_HAVE_NCCL unset) every entry says
 * so. Included by cuda_backend.cu and cuda_dist.cu only. */
#ifndef MD_CUDA_DIST_H
#define MD_CUDA_DIST_H

#include "backend/backend_impl.h"

md_status md_cuda_comm_unique_id(md_device *dev, unsigned char id[MD_COMM_ID_BYTES]);
md_status md_cuda_comm_init(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank);
md_status md_cuda_allreduce_sum(md_device *dev, float *buf, size_t n);
/* On the communicator's side stream after the device stream's work so far;
 * join makes the device stream wait for all of them (backend.h). */
md_status md_cuda_allreduce_start(md_device *dev, float *buf, size_t n);
md_status md_cuda_allreduce_join(md_device *dev);
md_status md_cuda_comm_busy_ms(md_device *dev, float *ms);
md_status md_cuda_comm_check(md_device *dev);
void md_cuda_comm_abort(md_device *dev);
/* cu_close: ends the device's communicator (waits for its work). */
void md_cuda_comm_close(md_device *dev);

#endif
