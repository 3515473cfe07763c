// layer model
