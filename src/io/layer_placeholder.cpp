// layer io
