// Losses on logits, computed in plain C++ (they are O(batch) and not worth a primitive).
// Both return the mean loss over the batch and write d(mean loss)/d(logit).
#pragma once

namespace kubetrain::trainer {

// Binary cross-entropy on sigmoid(logit); labels are 0/1. Numerically stable for
// large |logit|.
float SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int n, float* grad);
// The same for n samples of a batch of `batch` (a slice of it): returns the sum of their
// losses (the batch's mean loss is the sum over its slices / batch) and writes
// d(mean loss of the batch)/d(logit), the values the whole batch's call writes for them.
double SigmoidBinaryCrossEntropySum(const float* logits, const float* labels, int n, int batch,
                                    float* grad);

// Softmax cross-entropy; logits [n x classes], labels hold the class index as float.
float SoftmaxCrossEntropy(const float* logits, const float* labels, int n, int classes,
                          float* grad);

float Sigmoid(float x);

}  // namespace kubetrain::trainer
