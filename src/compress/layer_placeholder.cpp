// layer compress
