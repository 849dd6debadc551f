/* px_cuda_available() tells the truth, on machines with and without a GPU.
 * This test runs everywhere (it is never skipped):
 * - no usable GPU: it must return 0 with a reason that names what failed; when
 *   the CUDA runtime itself reports an error (no driver: error 35), the reason
 *   must carry that error's number and the call that returned it;
 * - a usable GPU: it must return 1, px_cuda_device_count must agree with
 *   cudaGetDeviceCount, and one tiny op must run and give the right answer.
 * It also links every public function of ops_cuda.h and gpt_cuda.h, so a
 * missing definition breaks the build here rather than in a GPU-only test. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "gpt_cuda.h"
#include "ops_cuda.h"

/* Referencing every public symbol forces each object file to be linked. */
static void *const g_public_symbols[] = {
    (void *)px_cuda_device_count, (void *)px_cuda_available, (void *)px_cuda_ops_init,
    (void *)px_cuda_ops_shutdown, (void *)px_cuda_ops_set_lt, (void *)px_cuda_ops_set_math, (void *)px_cuda_ops_math,
    (void *)encoder_forward_cuda, (void *)encoder_backward_cuda, (void *)encoder_backward_plan_ints,
    (void *)encoder_backward_plan,
    (void *)layernorm_forward_cuda, (void *)layernorm_backward_cuda, (void *)residual_layernorm_forward_cuda,
    (void *)matmul_forward_cuda, (void *)matmul_backward_cuda, (void *)matmul_backward_set_cuda,
    (void *)matmul_forward_gelu_cuda, (void *)matmul_backward_dgelu_cuda,
    (void *)attention_forward_cuda, (void *)attention_backward_cuda,
    (void *)flash_attention_supported, (void *)flash_attention_forward_cuda, (void *)flash_attention_backward_cuda,
    (void *)flash_attention_backward_set_cuda, (void *)gelu_forward_cuda, (void *)gelu_backward_cuda,
    (void *)gelu_backward_inplace_cuda,
    (void *)residual_forward_cuda, (void *)residual_backward_cuda,
    (void *)crossentropy_softmax_forward_cuda, (void *)crossentropy_softmax_backward_cuda,
    (void *)crossentropy_fused_cuda,
    (void *)adamw_update_cuda, (void *)adamw_update_tensors_cuda, (void *)norm_squared_cuda,
    (void *)scale_inplace_cuda,
    (void *)px_gpt_cuda_new, (void *)px_gpt_cuda_destroy, (void *)px_gpt_cuda_set_recompute,
    (void *)px_gpt_cuda_config, (void *)px_gpt_cuda_bf16_activations,
    (void *)px_gpt_cuda_fused_attention, (void *)px_cuda_ops_set_fused_attention, (void *)px_gpt_cuda_num_params,
    (void *)px_gpt_cuda_tensor_offset, (void *)px_gpt_cuda_buffer, (void *)px_gpt_cuda_stream,
    (void *)px_gpt_cuda_upload, (void *)px_gpt_cuda_download, (void *)px_gpt_cuda_forward,
    (void *)px_gpt_cuda_download_logits, (void *)px_gpt_cuda_download_losses,
    (void *)px_gpt_cuda_zero_grad, (void *)px_gpt_cuda_backward, (void *)px_gpt_cuda_grad_norm,
    (void *)px_gpt_cuda_clip_grads, (void *)px_gpt_cuda_adamw_step,
};

static int fail(const char *msg, const char *why) {
    printf("FAIL %s (reason given: \"%s\")\n", msg, why);
    return 1;
}

static int check_absent(const char *why) {
    if (strlen(why) < 10) return fail("px_cuda_available returned 0 without a reason", why);
    int n = -1;
    cudaError_t err = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (err != cudaSuccess) {
        char code[32];
        snprintf(code, sizeof code, "error %d", (int)err);
        if (!strstr(why, "cudaGetDeviceCount") || !strstr(why, code))
            return fail("the reason must name cudaGetDeviceCount and its error number", why);
    } else if (n > 0 && !strstr(why, "cannot run")) {
        return fail("a device exists, so the reason must say why it cannot be used", why);
    }
    char why2[512];
    if (px_cuda_device_count(why2, sizeof why2) != 0)
        return fail("px_cuda_device_count disagrees with px_cuda_available", why2);
    printf("ok   px_cuda_available() = 0: %s\n", why);
    return 0;
}

static int check_present(const char *why) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1)
        return fail("px_cuda_available returned 1 but cudaGetDeviceCount finds no device", why);
    char why2[512];
    if (px_cuda_device_count(why2, sizeof why2) != n)
        return fail("px_cuda_device_count disagrees with cudaGetDeviceCount", why2);
    /* One op end to end: x *= 0.5 on 1000 elements. */
    float h[1000], *d = NULL;
    for (int i = 0; i < 1000; i++) h[i] = (float)i;
    if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess ||
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess)
        return fail("cudaMalloc/cudaMemcpy failed on a device said to be usable", why);
    scale_inplace_cuda(d, 1000, 0.5f, 0);
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess)
        return fail("copying the result back failed", why);
    cudaFree(d);
    for (int i = 0; i < 1000; i++)
        if (h[i] != 0.5f * (float)i) return fail("scale_inplace_cuda gave a wrong result", why);
    printf("ok   px_cuda_available() = 1: %s; scale_inplace_cuda ran correctly\n", why);
    return 0;
}

int main(void) {
    printf("linked %zu public CUDA functions\n", sizeof g_public_symbols / sizeof g_public_symbols[0]);
    char why[512] = "";
    int ok = px_cuda_available(why, sizeof why);
    int rc = ok ? check_present(why) : check_absent(why);
    if (ok == 0 || ok == 1) return rc;
    return fail("px_cuda_available must return 0 or 1", why);
}
