// layer kernels
