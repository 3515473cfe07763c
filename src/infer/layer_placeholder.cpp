// layer infer
