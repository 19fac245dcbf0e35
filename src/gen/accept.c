/* accept.c — pure acceptance rules (see accept.h). */
#include "gen/accept.h"

int ink_accept_greedy(const int32_t *drafts, const int32_t *target, int M)
{
    int a = 0;
    while (a < M && drafts[a] == target[a]) a++;
    return a;
}

int ink_accept_draw(const float *p, const float *q, int32_t d, double u)
{
    return q[d] > 0 && u * q[d] <= p[d];
}

double ink_accept_residual(float *p, const float *q, int V)
{
    double mass = 0;
    for (int i = 0; i < V; i++) {
        float r = p[i] - q[i];
        p[i] = r > 0 ? r : 0;
        mass += p[i];
    }
    if (mass > 0)
        for (int i = 0; i < V; i++) p[i] = (float)(p[i] / mass);
    return mass;
}
