// layer tokenizer
